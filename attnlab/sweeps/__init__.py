"""Sweeps: experiment files -> trials (trials.py), run locally or on SLURM (runner.py), and the
`python -m attnlab.sweep` command (command.py)."""

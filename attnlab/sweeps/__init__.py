"""Sweeps: experiment files -> trials (trials.py), run locally or on SLURM (runner.py, slurm.py)
or listed (listing.py) by the `python -m attnlab.sweep` command (attnlab/sweep.py)."""

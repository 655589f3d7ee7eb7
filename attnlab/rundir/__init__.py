"""The run directory: its files and folders (layout.py), the lock of the process training in it,
run_times.jsonl, orbax checkpoints (and what a damaged one says), metric writers (metrics.jsonl,
TensorBoard) and the console lines that name it."""

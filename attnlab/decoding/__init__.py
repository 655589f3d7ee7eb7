"""Decoding: greedy and beam search (greedy.py, beam.py, on hypotheses.py's step contract; a
model's batch through either: search.py), decoding raw text with a trained model (inference.py),
attention heatmaps of decoded outputs (heatmaps.py) and loading a finished run for use (runs.py:
attnlab.load_run)."""

"""Reporting: sweep reports (sweep_report.py: tables, stats.py: bootstrap, plots.py), one-run
reports (run_report.py) and attention heatmaps (heatmaps.py)."""

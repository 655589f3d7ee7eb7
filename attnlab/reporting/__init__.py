"""Reporting: sweep reports (sweep_report.py: tables, seed_tests.py and comparisons.py: tests
across seeds, stats.py: bootstrap, plots.py), one-run reports (run_report.py) and attention
heatmaps (heatmaps.py)."""

"""Throughput of attnlab against a PyTorch reference: `python -m benchmarks.run [--quick]`."""

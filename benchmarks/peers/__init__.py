"""attnlab beside OpenNMT-py and Joey NMT on the same G2P network: `python -m benchmarks.peers`
(benchmarks/README.md, Peers)."""

"""The attention explorer: a local web server (server.py) and its single page (page.py).
Started with `python -m attnlab.explore --workdir=RUN`."""

"""The attention explorer: a local web server (server.py), the JSON API it serves (api.py) and
its single page (page.py).
Started with `python -m attnlab.explore --workdir=RUN`."""

"""Runtime: devices and hosts. Data parallelism over a device mesh (parallel.py), multi-process
start-up (distributed.py), Ctrl-C and SIGTERM (interrupt.py), the libraries' logs (logs.py), the
persistent compilation cache and the description of the machine a run used."""

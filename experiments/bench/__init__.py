"""Benchmarks of the implementation: what the service's paths cost in time and CPU, beside their floors.

Each ``bench_*`` script is run as ``python -m experiments.bench.<name>``; the others are the
benchmarks' parts (server and client processes, the echo floor, CPU accounting, h2load clients)
and probes of the runtime (``gil_starvation``, ``handler_in_situ``). ``python -m experiments.bench``
runs :mod:`experiments.bench.bench`, the data-path table. Results go to
``experiments/results/<name>/``, named by each script, not by this package.
"""

"""Collectors: measure real co-location interference and emit ``coloc/v1`` records.

- :mod:`collectors.timers`: batch timers (``perf_counter_ns`` on a CPU, CUDA events on a GPU).
- :mod:`collectors.sampler`, :mod:`collectors.buffer`: the sampler thread and its ring buffer.
- :mod:`collectors.cpu_sampler`, :mod:`collectors.nvml_sampler`, :mod:`collectors.nvml`: ``/proc`` and NVML signals.
- :mod:`collectors.tracker`: begin/end reports to records with co-runners, overlaps and signals.
- :mod:`collectors.models`, :mod:`collectors.profiling`: the real models and their solo profiles.
- :mod:`collectors.schedule`, :mod:`collectors.batching`, :mod:`collectors.worker`,
  :mod:`collectors.slot`, :mod:`collectors.workload`: the co-located workload (``run_collection``).
- :mod:`collectors.summary`: the slowdown summary printed by ``predictor collect``
  (the command itself is :mod:`predictor.cli.collect`).

Importing the package is cheap: ``torch`` is imported by the worker processes and
:mod:`collectors.models` only, ``pynvml`` by :mod:`collectors.nvml` on first use.
"""

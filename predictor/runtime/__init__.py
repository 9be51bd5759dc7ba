"""Process-level knobs: BLAS threads, the GIL switch interval and yielding, garbage collection, CPU pinning, helper threads, durable files.

The ground floor: imports nothing else from :mod:`predictor`.
"""

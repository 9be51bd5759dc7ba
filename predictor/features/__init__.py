"""Features of co-locations: what learners see of a record, or of many rows at once.

- :mod:`~predictor.features.extract`: the fine and coarse feature views, defined once.
- :mod:`~predictor.features.window`: the fine features as a function of the co-runners' overlaps.
- :mod:`~predictor.features.contention`: which features grow with crowding (kept non-negative).
- :mod:`~predictor.features.solo_profile`: the online solo-latency profile.

May import :mod:`predictor.records` and :mod:`predictor.runtime`.
"""

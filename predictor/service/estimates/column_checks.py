"""A ranking's candidate columns checked against the rules, their numbers in one compiled pass (numba).

:func:`valid_columns` says whether every candidate of a ranking passes what planning each one
alone checks (:mod:`predictor.records.rules`); where it does not, the service plans them one by one,
which names the field. Apart from :mod:`~predictor.service.estimates.placements`, whose column types
a client reads and writes too, so that a client never loads numba. Compiled on first use and cached
on disk (``cache=True``); a server loads it before it answers (:func:`warm`, through
:func:`~predictor.service.estimates.fixed_point_kernel.warm`).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from predictor.records import rules
from predictor.records.keyed import KeyedMaps
from predictor.records.record import BatchSpec
from predictor.service.estimates.placements import CandidateColumns, distinct_maps
from predictor.service.types import CoRunnerSource


def valid_columns(
    columns: CandidateColumns, batch: BatchSpec, solo_latency_ms: float | None, limit: float = rules.MAX_MAGNITUDE
) -> bool:
    """Whether every candidate passes what the per-candidate path checks (``False``: let it say why).

    The same rules (:mod:`predictor.records.rules`), column-wise, with ``limit`` the magnitude limit on
    numbers. Does not check the batch itself, nor whether live-view devices are known.
    """
    if not columns.typed:
        return False
    if solo_latency_ms is not None and not (
        rules.positive_ok(solo_latency_ms) and rules.latency_ok(solo_latency_ms, limit)
    ):
        return False
    attrs = columns.attrs
    keyed = isinstance(attrs, KeyedMaps)  # its values checked with the co-runners' numbers
    if not (rules.names_ok(columns.devices, required=True) and rules.names_ok(columns.device_kinds, required=False)):
        return False
    if not (
        rules.names_ok(columns.models, required=True)
        and (rules.keyed_keys_ok(attrs) if keyed else rules.maps_ok(attrs, limit))
        and rules.maps_ok(distinct_maps(columns.signals), limit)
    ):
        return False
    if columns.batch_sizes and not rules.batch_size_ok(min(columns.batch_sizes)):
        return False
    # the co-runners' counts, overlaps, remaining times (each given one way at most) and attribute values
    if not _numbers_ok(columns.offsets, rules.MAX_CO_RUNNERS, columns.overlaps, columns.has_overlap, columns.remaining,
                        columns.has_remaining, attrs.matrix if keyed else _NO_VALUES, float(limit)):
        return False
    if CoRunnerSource.LIVE_VIEW not in columns.sources:
        return True
    counts = np.diff(columns.offsets)
    return not any(s is CoRunnerSource.LIVE_VIEW and n for s, n in zip(columns.sources, counts.tolist(), strict=True))


_NO_VALUES = np.zeros((0, 0))


@njit(cache=True, nogil=True)
def _numbers_ok(offsets, most, overlaps, has_overlap, remaining, has_remaining, values, limit):  # pragma: no cover
    """The rules of :mod:`~predictor.records.rules` on a ranking's numbers, in one compiled pass: at most
    ``most`` co-runners a candidate; each co-runner's overlap in [0, 1] or its remaining time finite, at
    least 0 and at most ``limit``, not both given; each value of ``values`` (a keyed matrix, NaN:
    absent) finite and at most ``limit`` in magnitude."""
    for i in range(offsets.size - 1):
        if offsets[i + 1] - offsets[i] > most:
            return False
    for j in range(overlaps.size):
        if has_overlap[j]:
            if has_remaining[j] or not (overlaps[j] >= 0.0 and overlaps[j] <= 1.0):
                return False
        elif has_remaining[j] and not (remaining[j] >= 0.0 and remaining[j] <= limit and remaining[j] < np.inf):
            return False
    for value in values.ravel():
        if value == value and not (abs(value) <= limit and abs(value) < np.inf):
            return False
    return True


def warm() -> None:
    """Compile :func:`_numbers_ok` now (or load it from the disk cache), with the argument types a ranking passes."""
    flags = np.zeros(1, dtype=np.bool_)
    _numbers_ok(np.zeros(2, dtype=np.int64), rules.MAX_CO_RUNNERS, np.zeros(1), flags, np.zeros(1), flags,
                np.zeros((1, 1)), 1.0)

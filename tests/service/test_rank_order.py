"""The ranking's order: most slack first, ties to the less crowded device, then request order."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from predictor.records.colocations import CoLocations
from predictor.records.record import BatchSpec
from predictor.service.estimates.placements import rank_order

slacks = st.one_of(st.sampled_from([0.0, -0.0, 1.5, -2.0, np.nan, np.inf, -np.inf]), st.floats(-1e3, 1e3))


@given(st.lists(st.tuples(slacks, st.lists(st.sampled_from([0.25, 0.5, 1.0]), max_size=3)), min_size=1, max_size=30))
def test_order_is_the_sorted_keys(candidates):
    rows = CoLocations.build(BatchSpec("a", 1), [f"d{i}" for i in range(len(candidates))],
                             [[("b", 1, {}, overlap) for overlap in runners] for _, runners in candidates])
    slack = np.array([s for s, _ in candidates])

    def key(i: int) -> tuple:
        s, runners = candidates[i]
        most = -s if not np.isnan(s) else np.inf  # NaN last, as NumPy sorts it
        return (np.isnan(s), most, len(runners), float(np.sum(runners)) if runners else 0.0, i)

    assert rank_order(slack, rows).tolist() == sorted(range(len(candidates)), key=key)

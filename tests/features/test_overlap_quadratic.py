"""A feature form's answer as a quadratic of the overlaps (:meth:`FeatureForm.quadratic`) gives the
linear model's answer on the feature matrix at any overlaps (up to rounding), with some overlaps
fixed and the others free, for any subset of rows."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from predictor.features.extract import feature_form, feature_matrix
from predictor.records.colocations import CoLocations
from predictor.records.record import BatchSpec
from predictor.service.synthetic import MODELS

BATCH = BatchSpec("bert", 4, {"l2_util": 0.5, "dram_util": 0.4})
runner = st.tuples(st.sampled_from(sorted(MODELS)), st.integers(1, 16), st.floats(0.0, 1.0), st.booleans())


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(st.lists(runner, min_size=1, max_size=4), min_size=1, max_size=25),
       seed=st.integers(0, 2**32 - 1), features=st.sampled_from(["fine", "interactions"]), signals=st.booleans())
def test_the_quadratic_is_the_models_answer_on_the_matrix(rows, seed, features, signals):
    rng = np.random.default_rng(seed)
    co_runners = [[(model, size, {"l2_util": MODELS[model][0], "dram_util": MODELS[model][1]} if attrs
                    else {"seq_len": 64.0}, overlap) for model, size, overlap, attrs in row] for row in rows]
    built = CoLocations.build(BATCH, [f"d{i}" for i in range(len(rows))], co_runners,
                              signals=[{"sm_util": 0.5} if signals and i % 2 else {} for i in range(len(rows))])
    subset = np.flatnonzero(rng.random(len(rows)) < 0.7)
    form = feature_form(built, features, subset)
    weights, intercept = rng.normal(size=len(form.names)), float(rng.normal())
    free = rng.random(built.overlaps.size) < 0.5
    for quadratic, moving in ((form.quadratic(weights, intercept), np.ones_like(free)),
                              (form.quadratic(weights, intercept, np.append(built.overlaps, 0.0)[form.gather],
                                              np.append(free, False)[form.gather]), free)):
        for _ in range(3):
            overlaps = np.where(moving, rng.random(built.overlaps.size), built.overlaps)
            want = feature_matrix(built.with_overlaps(overlaps), features).values[subset] @ weights + intercept
            asked = np.append(np.where(moving, overlaps, 7.0), 0.0)[form.gather]  # a fixed one's value is not read
            np.testing.assert_allclose(quadratic.raw(asked), want, rtol=1e-12, atol=1e-12 * np.abs(want).max(initial=1.0))
            if subset.size > 1:
                some = np.array([subset.size - 1, 0])
                np.testing.assert_array_equal(quadratic.raw(asked[:, some], some), quadratic.raw(asked)[some])

"""RLS merged in information form equals one learner that saw both streams."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from predictor.regressors.least_squares import RLS
from predictor.regressors.merge import information_form, merge

NAMES = ("a", "b", "c", "d")


def _stream(seed: int, n: int, late_feature: bool) -> list[tuple[dict[str, float], float]]:
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        names = NAMES[:3] if not late_feature or i < n // 2 else NAMES
        x = {k: float(rng.uniform(-3, 3) * (10.0 if k == "b" else 1.0)) for k in names if rng.random() < 0.8}
        y = 1.5 + sum((j + 1) * v for j, v in enumerate(x.values())) + float(rng.normal(0, 0.1))
        rows.append((x, y))
    return rows


def _learn(rows, **kwargs) -> RLS:
    rls = RLS(forgetting=1.0, **kwargs)
    for x, y in rows:
        rls.learn_one(x, y)
    return rls


@settings(max_examples=60, deadline=None)
@example(seed=19, n=19, cut=0.8125, late_feature=True, delta=1e4, scale_features=True)
@example(seed=534, n=2, cut=0.0, late_feature=False, delta=1e4, scale_features=False)
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(2, 120),
    cut=st.floats(0.0, 1.0),
    late_feature=st.booleans(),
    delta=st.sampled_from([1.0, 100.0, 1e4]),
    scale_features=st.booleans(),
)
def test_merging_two_halves_equals_learning_the_whole(
    seed, n, cut, late_feature, delta, scale_features
) -> None:
    rows = _stream(seed, n, late_feature)
    k = int(cut * n)
    kwargs = {"delta": delta, "scale_features": scale_features}
    whole = _learn(rows, **kwargs)
    merged = merge(_learn(rows[:k], **kwargs), _learn(rows[k:], **kwargs))
    probes = [x for x, _ in _stream(seed + 1, 20, True)]
    expected = np.array([whole.predict_one(x) for x in probes])
    got = np.array([merged.predict_one(x) for x in probes])
    # within 1e-9 of the predictions' magnitude (sequential RLS rounds too: the whole learner is no
    # exact reference for an ill-conditioned stream either). With the weakest prior (delta 1e4) and
    # a feature arriving late in a short stream, that rounding alone reaches 1.2e-9 (the example).
    scale = max(1.0, float(np.abs(expected).max()))
    tolerance = 1e-9 if delta < 1e4 else 1e-8
    assert np.allclose(got, expected, rtol=tolerance, atol=tolerance * scale), np.abs(got - expected).max() / scale
    assert merged.n_updates == whole.n_updates
    # weights of directions the data barely determines (few rows, a weak prior) carry the rounding of
    # inverting an ill-conditioned covariance: 1e-8 of the largest weight, 1e-6 with the weakest prior
    # (delta 1e4), where a whole stream of 2-4 rows merged with an empty learner differs by up to 8.9e-8
    # (seeds 0-2999; random streams up to 7.4e-9), though the predictions agree within 1e-8 (above)
    largest = max(1.0, *map(abs, whole.weights.values()))
    weight_tolerance = 1e-8 if delta < 1e4 else 1e-6
    for name, w in whole.weights.items():
        assert merged.weights[name] == pytest.approx(w, abs=weight_tolerance * largest)
    # the merged learner keeps learning as the whole one does
    more = _stream(seed + 2, 10, True)
    for x, y in more:
        whole.learn_one(x, y)
        merged.learn_one(x, y)
    expected = np.array([whole.predict_one(x) for x in probes])
    scale = max(1.0, float(np.abs(expected).max()))
    assert np.allclose([merged.predict_one(x) for x in probes], expected, rtol=1e-8, atol=1e-8 * scale)


def test_information_form_is_the_sum_of_observations() -> None:
    rows = _stream(3, 50, False)
    form = information_form(_learn(rows, delta=1e3))
    columns = {name: i for i, name in enumerate(form.names)}
    x = np.zeros((len(rows), len(form.names)))
    x[:, 0] = 1.0
    for i, (features, _) in enumerate(rows):
        for name, value in features.items():
            x[i, columns[name]] = value
    y = np.array([target for _, target in rows])
    assert np.allclose(form.gram, x.T @ x, rtol=1e-7, atol=1e-6)
    assert np.allclose(form.moment, x.T @ y, rtol=1e-7, atol=1e-6)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"forgetting": 0.99}, "forgetting"), ({"max_trace": 10.0}, "max_trace")],
)
def test_states_that_are_not_sums_are_refused(kwargs, message) -> None:
    rls = RLS(**{"forgetting": 1.0, **kwargs})
    rls.learn_one({"a": 1.0}, 1.0)
    with pytest.raises(ValueError, match=message):
        merge(rls, RLS(forgetting=1.0))


def test_refused_updates_make_a_state_unmergeable() -> None:
    rls = RLS(forgetting=1.0)
    rls.learn_one({"a": 1.0}, 1.0)
    rls.learn_one({"a": 1e300}, 1e300)  # refused: non-finite step
    assert rls.n_refused == 1
    with pytest.raises(ValueError, match="refused"):
        merge(rls, RLS(forgetting=1.0))

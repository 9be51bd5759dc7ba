"""The projection's pinned set and gain by a bordered Cholesky factor (predictor/regressors/pinned.py),
against the search by a fresh LU solve per candidate set it replaced, and the compiled kernel against it."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from predictor.regressors.gain_kernel import find_gain as kernel_find_gain
from predictor.regressors.pinned import ROUNDS, find_gain


def _by_lu(covariance: np.ndarray, weights: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The search as it was: each candidate set solved afresh (LU), the gain by one more LU solve."""
    active = np.flatnonzero(mask & (weights < 0))
    pinned = None
    for _ in range(ROUNDS) if active.size else ():
        solved = np.linalg.solve(covariance[np.ix_(active, active)], weights[active])
        pinned = active
        moved = weights - covariance[:, active] @ solved
        moved[active] = 0.0
        more = np.flatnonzero(mask & (moved < 0))
        if not more.size:
            break
        active = np.union1d(active, more)
    if pinned is None:
        return np.zeros(0, dtype=np.intp), np.zeros((weights.size, 0))
    return pinned, np.linalg.solve(covariance[np.ix_(pinned, pinned)], covariance[pinned, :]).T


def _by_kernel(covariance: np.ndarray, weights: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    size = weights.size
    pinned, gain = np.zeros(size, dtype=np.int64), np.zeros((size, size))
    upper = np.asfortranarray(np.triu(covariance) + 7.0 * np.tril(np.ones((size, size)), -1))  # below: never read
    k = kernel_find_gain(upper, 1.0, weights, mask, pinned, gain)
    return pinned[:k], gain[:, :k]


def _by_kernel_mirrored(covariance: np.ndarray, weights: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The kernel reading all of ``S``, as an RLS run that keeps the lower triangle the upper's mirror."""
    size = weights.size
    pinned, gain = np.zeros(size, dtype=np.int64), np.zeros((size, size))
    full = np.asfortranarray(np.triu(covariance) + np.triu(covariance, 1).T)
    k = kernel_find_gain(full, 1.0, weights, mask, pinned, gain, True)
    return pinned[:k], gain[:, :k]


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), size=st.integers(1, 40), observations=st.integers(0, 80),
       share=st.floats(0.1, 1.0))
def test_the_bordered_search_pins_the_set_of_fresh_solves_with_the_same_gain(seed, size, observations, share):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(observations, size))
    covariance = np.linalg.inv(np.eye(size) + x.T @ x)  # an RLS posterior covariance
    covariance = (covariance + covariance.T) / 2
    weights = rng.normal(size=size) - 0.3
    mask = rng.random(size) < share
    expected = _by_lu(covariance, weights, mask)
    for pinned, gain in (find_gain(covariance, weights, mask), _by_kernel(covariance, weights, mask)):
        np.testing.assert_array_equal(pinned, expected[0])
        np.testing.assert_allclose(gain, expected[1], rtol=1e-9, atol=1e-12)
        assert (gain[pinned, np.arange(pinned.size)] == 1.0).all()
    upper, mirrored = _by_kernel(covariance, weights, mask), _by_kernel_mirrored(covariance, weights, mask)
    np.testing.assert_array_equal(upper[0], mirrored[0])
    np.testing.assert_array_equal(upper[1], mirrored[1])  # the same numbers, read from either triangle


def test_a_singular_block_stops_the_search_with_the_last_set_found():
    # pinning column 0 pushes column 1 below 0, and columns 0 and 1 together are singular
    covariance = np.array([[1.0, -1.0, 0.0], [-1.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    weights, mask = np.array([-1.0, 0.5, 1.0]), np.ones(3, dtype=bool)
    for pinned, gain in (find_gain(covariance, weights, mask), _by_kernel(covariance, weights, mask)):
        np.testing.assert_array_equal(pinned, [0])
        np.testing.assert_array_equal(gain[:, 0], [1.0, -1.0, 0.0])


def test_a_singular_first_block_pins_nothing():
    covariance, mask = np.ones((2, 2)), np.ones(2, dtype=bool)
    for pinned, gain in (find_gain(covariance, np.array([-1.0, -2.0]), mask),
                         _by_kernel(covariance, np.array([-1.0, -2.0]), mask)):
        assert pinned.size == 0 and gain.shape == (2, 0)


def test_nothing_negative_pins_nothing():
    pinned, gain = find_gain(np.eye(3), np.array([1.0, -1.0, 0.0]), np.array([True, False, True]))
    assert pinned.size == 0 and gain.shape == (3, 0)

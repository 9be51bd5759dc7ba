"""Merging RLS models that learned disjoint streams, through the information form.

An :class:`~predictor.regressors.least_squares.RLS` that never forgets (``forgetting=1``)
holds the ridge solution of everything it learned: over the scaled features
``z = x / s`` (``s`` the column scales), precision ``H = I / delta + sum z z'``
and weights ``w = H^-1 sum z y``. Both sums are additive over observations, so
two learners of disjoint streams combine exactly in raw feature space:

* Gram matrix ``G = sum x x' = S (H - I / delta) S``, with ``S = diag(s)``;
* moment ``r = sum x y = S H w``.

:func:`merge` adds the Gram matrices and moments of two learners, re-expresses
them at the merged column scales, and solves for the weights: the result is the
learner that saw both streams, one after the other (the first learner's column
scales win, as they would for a learner that saw its stream first), up to
rounding.

Exactness needs a learner whose state *is* that ridge solution: ``forgetting``
of 1, no refused update (a refused step or a lost-definiteness re-open breaks
the sums), no trace bound below the prior (``max_trace`` unset) and no
:meth:`~predictor.regressors.least_squares.RLS.reset_covariance` (the owner's drift
response). :func:`merge` checks what the state records and refuses the rest.

Examples
--------
>>> from predictor.regressors.least_squares import RLS
>>> first, second, whole = (RLS(forgetting=1.0, delta=1e3) for _ in range(3))
>>> for i, x in enumerate([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]):
...     (first if i < 3 else second).learn_one({"x": x}, 2.0 * x + 1.0)
...     whole.learn_one({"x": x}, 2.0 * x + 1.0)
>>> merged = merge(first, second)
>>> abs(merged.predict_one({"x": 10.0}) - whole.predict_one({"x": 10.0})) < 1e-9
True
"""

from __future__ import annotations

import dataclasses

import numpy as np

from predictor.regressors.least_squares import RLS

INTERCEPT = "intercept"


@dataclasses.dataclass(frozen=True)
class InformationForm:
    """An RLS state as additive sums over raw features.

    Attributes
    ----------
    names
        Feature name of each column, ``"intercept"`` first.
    scales
        Each column's scale (0: never seen non-zero).
    gram
        ``sum x x'`` over the raw features.
    moment
        ``sum x y`` over the raw features.
    delta
        The prior covariance scale of the learner.
    n_updates
        Observations summed.
    """

    names: tuple[str, ...]
    scales: np.ndarray
    gram: np.ndarray
    moment: np.ndarray
    delta: float
    n_updates: int


def check_mergeable(rls: RLS) -> None:
    """Raise ``ValueError`` naming why ``rls`` is not a plain ridge solution (see the module notes)."""
    if rls.forgetting != 1.0:
        raise ValueError(f"forgetting must be 1 to merge exactly, got {rls.forgetting!r}")
    if rls.n_refused:
        raise ValueError(f"{rls.n_refused} refused update(s): the state is no longer a sum of observations")
    if rls.max_trace is not None:
        raise ValueError("max_trace is set: a bounded trace rescales the prior")


def information_form(rls: RLS) -> InformationForm:
    """The additive sums behind ``rls`` (see :func:`check_mergeable` for when they are exact)."""
    check_mergeable(rls)
    size = rls.index.size
    names = [INTERCEPT] + [""] * (size - 1)
    for name, column in rls.index.columns.items():
        names[column] = name
    scales = rls._column_scale[:size].copy()
    s = np.where(scales > 0, scales, 1.0)
    precision = np.linalg.inv(rls.covariance[:size, :size])
    precision = (precision + precision.T) / 2
    data = precision - np.eye(size) / rls.delta
    gram = data * np.outer(s, s)
    moment = s * (precision @ rls._weights[:size])
    return InformationForm(tuple(names), scales, gram, moment, rls.delta, rls.n_updates)


def merge(first: RLS, second: RLS) -> RLS:
    """One RLS equal to a learner that saw ``first``'s stream and then ``second``'s.

    Both must share ``delta`` and ``scale_features``; a column present in only one
    keeps its weights' evidence from that one. Raises ``ValueError`` when either
    state is not exactly mergeable (:func:`check_mergeable`).
    """
    if first.delta != second.delta or first.scale_features != second.scale_features:
        raise ValueError("merged learners must share delta and scale_features")
    a, b = information_form(first), information_form(second)
    names = list(a.names) + [n for n in b.names if n not in set(a.names)]
    column = {name: i for i, name in enumerate(names)}
    size = len(names)
    gram, moment, scales = np.zeros((size, size)), np.zeros(size), np.zeros(size)
    for part in (b, a):  # the first learner's scales win where both have one
        at = np.array([column[n] for n in part.names])
        gram[np.ix_(at, at)] += part.gram
        moment[at] += part.moment
        seen = part.scales > 0
        scales[at[seen]] = part.scales[seen]
    s = np.where(scales > 0, scales, 1.0)
    precision = np.eye(size) / a.delta + gram / np.outer(s, s)
    covariance = np.linalg.inv(precision)
    covariance = (covariance + covariance.T) / 2
    weights = covariance @ (moment / s)

    merged = RLS(
        forgetting=1.0,
        delta=first.delta,
        max_features=max(first.index.max_features, second.index.max_features, size - 1),
        scale_features=first.scale_features,
        non_negative_contention=first.__dict__.get("non_negative_contention", False),
    )
    merged.index.columns = {name: i for i, name in enumerate(names) if i > 0}
    merged._weights = weights
    merged._column_scale = scales
    merged._s = np.asfortranarray(covariance)
    merged._scale = 1.0
    merged._trace_s = float(np.trace(covariance))
    merged._all_scaled = bool((scales > 0).all())
    merged.n_updates = a.n_updates + b.n_updates
    if merged.non_negative_contention:  # the projection predictions use, found for the merged state
        merged.search_pinned()
    return merged

"""Merging RLS models that learned disjoint streams, through the information form.

An :class:`~predictor.regressors.least_squares.RLS` that never forgets (``forgetting=1``)
holds the ridge solution of everything it learned: over the scaled features
``z = x / s`` (``s`` the column scales), precision ``H = I / delta + sum z z'``
and weights ``w = H^-1 sum z y``. Both sums are additive over observations, so
two learners of disjoint streams combine exactly in raw feature space:

* Gram matrix ``G = sum x x' = S (H - I / delta) S``, with ``S = diag(s)``;
* moment ``r = sum x y = S H w``.

:func:`merge` adds them, re-expresses them at the merged column scales (the first learner's win)
and solves for the weights: up to rounding, the learner that saw both streams one after the
other. That needs states that *are* the ridge solution: ``forgetting`` of 1, no refused update or
re-opened covariance, no trace bound below the prior (``max_trace`` unset) and no
:meth:`~predictor.regressors.least_squares.RLS.reset_covariance`; :func:`merge` refuses the rest.

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


def _precision_form(rls: RLS) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    """``rls``'s column names (intercept first), column scales, the scales with 1 where a column has
    none, and its precision (the inverse covariance, symmetrised), over its columns in use."""
    size = rls.index.size
    names = [INTERCEPT] + [""] * (size - 1)
    for name, column in rls.index.columns.items():
        names[column] = name
    scales = rls._column_scale[:size].copy()
    s = np.where(scales > 0, scales, 1.0)
    precision = np.linalg.inv(rls.covariance[:size, :size])
    return names, scales, s, (precision + precision.T) / 2


def _merged(first: RLS, second: RLS, names: list[str], scales: np.ndarray, precision: np.ndarray,
            moment: np.ndarray, n_updates: int, **settings: object) -> RLS:
    """The RLS with ``precision`` and ``moment`` (in scaled features) over columns ``names``, the
    settings of ``first`` but those given, and its projection searched where it has one."""
    covariance = np.linalg.inv(precision)
    covariance = (covariance + covariance.T) / 2
    s = np.where(scales > 0, scales, 1.0)
    merged = RLS(
        delta=first.delta,
        max_features=max(first.index.max_features, second.index.max_features, len(names) - 1),
        scale_features=first.scale_features,
        non_negative_contention=first.non_negative_contention,
        **settings,
    )
    merged.index.columns = {name: i for i, name in enumerate(names) if i > 0}
    merged._weights = covariance @ (moment / s)
    merged._column_scale = scales
    merged._s = np.asfortranarray(covariance)
    merged._scale = 1.0
    merged._trace_s = float(np.trace(covariance))
    merged._all_scaled = bool((scales > 0).all())
    merged.n_updates = n_updates
    if merged.non_negative_contention:  # the projection predictions use, found for the merged state
        merged.search_pinned()
    return merged


def information_form(rls: RLS) -> InformationForm:
    """The additive sums behind ``rls`` (see :func:`check_mergeable` for when they are exact)."""
    check_mergeable(rls)
    names, scales, s, precision = _precision_form(rls)
    size = len(names)
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
    return _merged(first, second, names, scales, precision, moment, a.n_updates + b.n_updates, forgetting=1.0)


def merge_discounted(first: RLS, second: RLS) -> RLS:
    """One RLS standing for a learner that saw ``first``'s stream and then ``second``'s, for any
    ``forgetting``: ``first``'s evidence discounted by ``forgetting ** second.n_updates`` (its records
    are that many steps older in the union), ``second``'s as it is, ``second``'s prior counted once.

    In raw features, with ``H = P^-1`` each learner's precision and ``S`` its column scales, the
    union's precision is ``l^n_b S_a H_a S_a + S_b H_b S_b - l^n_b S_b I/delta S_b`` and its moment
    ``l^n_b S_a H_a w_a + S_b H_b w_b`` (``l`` the forgetting factor, ``n_b`` the second's updates).
    Exact (up to rounding) where the states are those sums: ``forgetting`` 1 (then it is :func:`merge`),
    no refused update, no re-opened covariance, no trace bound reached, columns present from the
    start. Otherwise an approximation: the trace bound (by default ``delta`` per column) rescales an
    RLS's covariance once its unexcited directions have grown that far, and a column's prior dates
    from when it first appeared; ``docs/design.md`` (Merging shards) gives the measured difference
    from a learner that saw both streams. With ``non_negative_contention`` the projection's pinned
    set is searched anew for the merged state.

    Both must share ``forgetting``, ``delta``, ``max_trace``, ``scale_features`` and
    ``non_negative_contention`` (``ValueError`` naming the one that differs).
    """
    for name in ("forgetting", "delta", "max_trace", "scale_features", "non_negative_contention"):
        if getattr(first, name) != getattr(second, name):
            raise ValueError(f"merged learners must share {name}: {getattr(first, name)!r} and "
                             f"{getattr(second, name)!r}")
    discount = first.forgetting ** second.n_updates
    parts = []
    for rls, weight in ((first, discount), (second, 1.0)):
        names, scales, s, precision = _precision_form(rls)
        moment = s * (precision @ rls._weights[:len(names)])
        # its prior on each column, in raw features (a column's prior taken as if it dated from the start)
        prior = weight * rls.forgetting ** rls.n_updates / rls.delta * s * s
        parts.append((names, scales, weight * precision * np.outer(s, s), weight * moment, prior))
    names_a, names_b = parts[0][0], parts[1][0]
    known = set(names_a)
    names = list(names_a) + [n for n in names_b if n not in known]
    column = {name: i for i, name in enumerate(names)}
    size = len(names)
    gram, moment, scales = np.zeros((size, size)), np.zeros(size), np.zeros(size)
    priors = np.zeros((2, size))
    for side in (1, 0):  # the first's scales win where both have one
        part_names, part_scales, part_gram, part_moment, part_prior = parts[side]
        at = np.array([column[n] for n in part_names])
        gram[np.ix_(at, at)] += part_gram
        moment[at] += part_moment
        priors[side, at] = part_prior
        seen = part_scales > 0
        scales[at[seen]] = part_scales[seen]
    # a column both have keeps one prior, the one of the side whose scale it took
    both = np.zeros(size, dtype=bool)
    both[[column[n] for n in names_b if n in known]] = True
    scale_a = np.zeros(size)
    scale_a[[column[n] for n in names_a]] = parts[0][1]
    second_wins = both & (scale_a <= 0) & (scales > 0)
    gram[np.diag_indices(size)] -= np.where(both, np.where(second_wins, priors[0], priors[1]), 0.0)
    # a column only the first had keeps its prior (discounted with it); one only the second had, the second's
    s = np.where(scales > 0, scales, 1.0)
    return _merged(first, second, names, scales, gram / np.outer(s, s), moment, first.n_updates + second.n_updates,
                   forgetting=first.forgetting, max_trace=first.max_trace)

"""The RLS step of :class:`~predictor.regressors.least_squares.RLS`, compiled (numba) and run over a block of rows.

Over a block of observations that need no new column (the usual case once a stream has warmed
up), :func:`learn_block` runs the arithmetic of :meth:`RLS.learn_vector
<predictor.regressors.least_squares.RLS.learn_vector>` in one compiled loop: the prediction, the
guards, the rank-1 update of ``S`` and, with ``non_negative_contention``, the projected prediction
and the pinned set's periodic search (:func:`predictor.regressors.gain_kernel.find_gain`). Rows
come dense (:func:`learn_rows`) or as plans (:class:`RowPlans`, :class:`PlannedRun`: each row's
base values and the number of a plan saying at which columns they go and which pairs multiply).

The reference class stays the definition: the kernel reads and writes its state, keeps every
sum's order of additions (skipping only exact zeros) and is held equal to it within 1e-9 on
random streams, looser where ill-conditioned (``tests/regressors/test_rls_kernel.py``). Rows that would grow
the model go through the reference one at a time, so the state is the same whatever the block
boundaries. Compiled on first use and cached on disk (``cache=True``), in strict IEEE order.

Examples
--------
>>> import numpy as np
>>> from predictor.regressors.least_squares import RLS
>>> a, b = RLS(), RLS()
>>> x = np.array([[1.0, 2.0], [2.0, 1.0], [3.0, 0.5]]); y = np.array([1.0, 2.0, 3.0])
>>> _ = learn_block(a, ("u", "v"), x, y)
>>> for row, target in zip(x, y):
...     b.learn_one({"u": row[0], "v": row[1]}, target)
>>> bool(np.allclose(a._weights, b._weights, rtol=1e-12, atol=1e-12))
True
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from predictor.regressors.gain_kernel import find_gain as _find_gain
from predictor.regressors.least_squares import RESCALE_ABOVE, RLS, search_schedule

MIRROR_FROM = 64
"""Columns from which a run keeps the lower triangle as the upper's mirror (the same products) and
walks only a row's non-zero columns; below, the plain ``dsymv`` order over every column and the
upper triangle only is the cheaper of the two."""

# state vector layout: scale c, trace of S, updates, refused, resets (all absolute), pinned columns of the gain,
# the update after which the gain was last searched (absolute)
_C, _TRACE, _UPDATES, _REFUSED, _RESETS, _PINNED, _SEARCHED_AT = 0, 1, 2, 3, 4, 5, 6


@njit(cache=True, nogil=True, inline="always")
def _nonzeros(x, nz):  # pragma: no cover
    """The positions of ``x``'s non-zero (or NaN) entries into ``nz``, ascending; returns how many."""
    k = 0
    for i in range(x.size):
        if x[i] != 0.0:
            nz[k] = i
            k += 1
    return k


@njit(cache=True, nogil=True, inline="always")
def _step(s, w, state, x, nz, k, target, lam, delta, bound, rescale_above, sx, acc, new_w,
          mirrored):  # pragma: no cover
    """The reference ``learn_vector`` of one scaled row ``x`` (its ``k`` non-zero positions in ``nz``,
    :func:`_nonzeros`); returns its prediction ``x'w`` before the step and whether the step was taken."""
    d = w.size
    c = state[_C]
    # sx = S x, with the additions of the reference (over the upper triangle, column by column, as
    # dsymv) in their order
    if mirrored:
        # a zero x[j] adds exact zeros there, so only the non-zero columns are walked: each row's
        # sum over the columns before it (``acc``, read down the lower triangle, the upper's mirror,
        # where it is contiguous), then the upper columns' parts
        for i in range(d):
            acc[i] = 0.0
        for q in range(k):
            i = np.uint64(nz[q])  # unsigned: no wrap-around test per index, so the loop vectorises
            xi = x[i]
            for r in range(i + np.uint64(1), np.uint64(d)):
                acc[r] += s[r, i] * xi
        for j in range(d):
            sx[j] = s[j, j] * x[j] + acc[j]
        for q in range(k):
            j = np.uint64(nz[q])
            xj = x[j]
            for i in range(j):
                sx[i] += s[i, j] * xj
    else:  # every column, each row's sum over the ones before it a running sum (as dsymv)
        for i in range(d):
            sx[i] = 0.0
        for j in range(d):
            xj = x[j]
            total = 0.0
            for i in range(j):
                a = s[i, j]
                sx[i] += a * xj
                total += a * x[i]
            sx[j] += s[j, j] * xj + total
    xsx = 0.0
    xw = 0.0
    if mirrored:
        for q in range(k):  # the zero terms are exact zeros
            i = nz[q]
            xsx += x[i] * sx[i]
            xw += x[i] * w[i]
    else:
        for i in range(d):
            xsx += x[i] * sx[i]
            xw += x[i] * w[i]
    quad = c * xsx
    denominator = lam + quad
    error = target - xw
    step = c * error / denominator
    finite = math.isfinite(denominator)
    for i in range(d):
        new_w[i] = w[i] + step * sx[i]
        if not math.isfinite(new_w[i]):
            finite = False
    if not finite:
        state[_REFUSED] += 1.0
        return xw, False
    if quad < 0:  # lost definiteness: re-open P = delta * I, keep the weights
        state[_REFUSED] += 1.0
        state[_RESETS] += 1.0
        for j in range(d):
            for i in range(d):
                s[i, j] = 0.0
            s[j, j] = delta
        state[_C] = 1.0
        state[_TRACE] = delta * d
        if state[_C] * state[_TRACE] > bound:
            state[_C] = bound / state[_TRACE]
        return xw, False
    for i in range(d):
        w[i] = new_w[i]
    alpha = -c / denominator
    sxsx = 0.0
    for j in range(d):
        acc[j] = alpha * sx[j]  # the reference's factor of column j
        sxsx += sx[j] * sx[j]
    for j in range(np.uint64(d)):  # the rank-1 step of the upper triangle, as dsyr, and the same products below
        temp = acc[j]
        for i in range(j + np.uint64(1)):
            s[i, j] += sx[i] * temp
        if mirrored:
            sj = sx[j]
            for r in range(j + np.uint64(1), np.uint64(d)):
                s[r, j] += sj * acc[r]
    trace = state[_TRACE] + alpha * sxsx
    c = c / lam
    if trace <= 0 or not math.isfinite(trace):
        trace = 0.0
        for i in range(d):
            trace += s[i, i]
    if c * trace > bound:
        c = bound / trace
    if c > rescale_above:
        for j in range(d):
            for i in range(d):
                s[i, j] *= c
        trace *= c
        c = 1.0
    state[_C] = c
    state[_TRACE] = trace
    state[_UPDATES] += 1.0
    return xw, True


@njit(cache=True, nogil=True)
def _mirror(s):  # pragma: no cover
    """Copy the upper triangle of ``s`` into its lower one (which the reference never reads)."""
    d = s.shape[0]
    for j in range(d):
        for i in range(j + 1, d):
            s[i, j] = s[j, i]


@njit(cache=True, nogil=True, inline="always")
def _projected_dot(x, nz, n, w, mask, pinned, gain, k, out, flag, pinned_weights, free):  # pragma: no cover
    """``x'v`` for ``v`` the reference ``predicting_weights`` (``w - gain @ w[pinned]``, the ``k`` pinned
    columns at 0, then every constrained weight (``mask``) clipped at 0), from ``v``'s entries at
    ``x``'s ``n`` non-zero positions ``nz`` only: the other terms are exact zeros; and whether one
    of those entries was clipped (the reference ``_clips``).

    ``gain`` is row-major: the entry of ``gain @ w[pinned]`` at a free non-zero position is the sum
    over its (contiguous) row in the order of the pinned columns, four rows at a time as four
    independent sums (a pinned position's entry is 0 whatever it sums to, so it is not summed).
    ``out``, ``pinned_weights`` and ``free``: scratch; ``flag`` (all False, and left so): scratch."""
    for p in range(k):
        pinned_weights[p] = w[pinned[p]]
        flag[pinned[p]] = True
    m = 0
    for q in range(n):
        if not flag[nz[q]]:
            free[m] = q
            m += 1
    start = 0
    while start + 4 <= m:
        q0, q1, q2, q3 = free[start], free[start + 1], free[start + 2], free[start + 3]
        r0, r1, r2, r3 = gain[nz[q0]], gain[nz[q1]], gain[nz[q2]], gain[nz[q3]]
        a0 = a1 = a2 = a3 = 0.0
        for p in range(k):
            wp = pinned_weights[p]
            a0 += r0[p] * wp
            a1 += r1[p] * wp
            a2 += r2[p] * wp
            a3 += r3[p] * wp
        out[q0], out[q1], out[q2], out[q3] = a0, a1, a2, a3
        start += 4
    for j in range(start, m):
        row = gain[nz[free[j]]]
        total = 0.0
        for p in range(k):
            total += row[p] * pinned_weights[p]
        out[free[j]] = total
    prediction = 0.0
    clipped = False
    for q in range(n):
        i = nz[q]
        if flag[i]:
            value = 0.0
        else:
            value = w[i] - out[q] if k else w[i]
            if mask[i] and value < 0.0:
                value = 0.0
                clipped = True
        prediction += x[i] * value
    for p in range(k):
        flag[pinned[p]] = False
    return prediction, clipped


@njit(cache=True, nogil=True, inline="always")
def _learn(s, w, state, x, target, lam, delta, bound, rescale_above, sx, acc, nz, new_w, mask, pinned, gain,
           project_every, min_gap, projected, flag, pinned_weights, free, mirrored):  # pragma: no cover
    """:func:`_step` of one row with, where ``mask`` is non-empty (``non_negative_contention``), the
    prediction from the projected weights and the gain searched anew every ``project_every`` updates
    and after a row whose prediction clipped one of its weights, ``min_gap`` updates at least after
    the last search; returns the prediction and ``x'w`` (the unconstrained fit)."""
    k = _nonzeros(x, nz) if mirrored or mask.size else 0
    prediction = 0.0
    clipped = False
    if mask.size:
        prediction, clipped = _projected_dot(x, nz, k, w, mask, pinned, gain, int(state[_PINNED]), projected,
                                             flag, pinned_weights, free)
    xw, taken = _step(s, w, state, x, nz, k, target, lam, delta, bound, rescale_above, sx, acc, new_w, mirrored)
    if not mask.size:
        return xw, xw
    updates = int(state[_UPDATES])
    if taken and (updates % project_every == 0 or clipped and updates - int(state[_SEARCHED_AT]) >= min_gap):
        state[_PINNED] = _find_gain(s, state[_C], w, mask, pinned, gain, mirrored)
        state[_SEARCHED_AT] = updates
    return prediction, xw


@njit(cache=True, nogil=True, inline="always")
def _scratch(d):  # pragma: no cover
    """The working arrays of :func:`_learn` for a model of ``d`` columns: ``sx, acc, new_w, projected,
    nz, free, flag, pinned_weights``."""
    return (np.empty(d), np.empty(d), np.empty(d), np.empty(d), np.empty(d, dtype=np.int64),
            np.empty(d, dtype=np.int64), np.zeros(d, dtype=np.bool_), np.empty(d))


@njit(cache=True, nogil=True)
def _rls_rows(s, w, state, rows, targets, lam, delta, bound, rescale_above, mask, pinned, gain, project_every,
              min_gap, mirrored, predictions, fits):  # pragma: no cover
    """:func:`_learn` of every row of ``rows`` in order."""
    d = w.size
    sx, acc, new_w, projected, nz, free, flag, pinned_weights = _scratch(d)
    for t in range(rows.shape[0]):
        predictions[t], fits[t] = _learn(s, w, state, rows[t], targets[t], lam, delta, bound, rescale_above, sx,
                                         acc, nz, new_w, mask, pinned, gain, project_every, min_gap, projected,
                                         flag, pinned_weights, free, mirrored)


@njit(cache=True, nogil=True)
def _rls_planned(s, w, state, scale, plan_of_row, bases, extra_offsets, extra_columns, extra_values, positions,
                 position_offsets, left, right, product_offsets, keys, copy_offsets, targets, lam, delta, bound, rescale_above, mask, pinned,
                 gain, project_every, min_gap, mirrored, predictions, fits):  # pragma: no cover
    """:func:`_learn` of every row given by a plan (:class:`RowPlans`), scaled as ``RLS.vectorize``
    scales it: row ``t`` follows plan ``plan_of_row[t]`` from its base values, the next ones of
    ``bases``; its values are the base values, their products by pairs and copies of some of them
    (:func:`predictor.features.extract.interaction_values`: the same products), at the plan's column
    positions in that order (column 0 implied; a position of -1: a value the model has no column for,
    dropped as :meth:`FeatureIndex.vector_of <predictor.regressors.feature_index.FeatureIndex.vector_of>`
    drops it); then its extra values ``extra_values[extra_offsets[t]:extra_offsets[t + 1]]`` at their
    columns ``extra_columns`` (each column at most once in a row, none of the plan's)."""
    d = w.size
    sx, acc, new_w, projected, nz, free, flag, pinned_weights = _scratch(d)
    x = np.zeros(d)
    base = 0
    for t in range(plan_of_row.size):
        for i in range(d):
            x[i] = 0.0
        x[0] = 1.0 / scale[0] if scale[0] > 0 else 0.0
        plan = plan_of_row[t]
        at, end = position_offsets[plan], position_offsets[plan + 1]
        first, last = product_offsets[plan], product_offsets[plan + 1]
        copied, stop = copy_offsets[plan], copy_offsets[plan + 1]
        count = (end - at) - (last - first) - (stop - copied)
        for j in range(count):
            p = positions[at]
            at += 1
            if p > 0:
                x[p] = bases[base + j] / scale[p] if scale[p] > 0 else 0.0
        for m in range(first, last):
            p = positions[at]
            at += 1
            if p > 0:
                value = bases[base + left[m]] * bases[base + right[m]]
                x[p] = value / scale[p] if scale[p] > 0 else 0.0
        for m in range(copied, stop):
            p = positions[at]
            at += 1
            if p > 0:
                x[p] = bases[base + keys[m]] / scale[p] if scale[p] > 0 else 0.0
        base += count
        for e in range(extra_offsets[t], extra_offsets[t + 1]):
            p = extra_columns[e]
            x[p] = extra_values[e] / scale[p] if scale[p] > 0 else 0.0
        predictions[t], fits[t] = _learn(s, w, state, x, targets[t], lam, delta, bound, rescale_above, sx, acc,
                                         nz, new_w, mask, pinned, gain, project_every, min_gap, projected,
                                         flag, pinned_weights, free, mirrored)


class RowPlans:
    """How rows are made from their base values (:func:`predictor.features.extract.planned_row`), as the
    arrays :class:`PlannedRun` takes: per plan, the column position of each of a row's values, and
    which base values are multiplied (``left``, ``right``) and copied (``keys``).

    Plans are only added; the arrays grow in place (by doubling), so a block in flight keeps reading
    the plans it was made with while others are added."""

    _FIELDS = ("positions", "left", "right", "keys")

    def __init__(self) -> None:
        self._data = {name: np.zeros(4096, dtype=np.int64) for name in self._FIELDS}  # grown when a row needs more
        self._offsets = {name: np.zeros(65, dtype=np.int64) for name in self._FIELDS}
        self._counts = np.zeros(64, dtype=np.int64)  # each plan's base values
        self._highest = np.zeros(64, dtype=np.int64)  # and its highest column position
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def add(self, positions: np.ndarray, left: np.ndarray, right: np.ndarray, keys: np.ndarray) -> int:
        """A plan: a row's values go to columns ``positions`` (1 on: column 0 is the intercept's; -1 for a
        value without a column, which is dropped): its base values, then the products of the base values
        at ``left`` and ``right``, then the base values at ``keys``; returns its number."""
        count = positions.size - left.size - keys.size
        if left.size != right.size or count < 0:
            raise ValueError(f"a plan of {positions.size} positions cannot hold {left.size} products "
                             f"and {keys.size} copies")
        indices = np.concatenate((left, right, keys))  # checked at once; named on failure
        if indices.size and not (0 <= indices.min() and indices.max() < count):
            for name, some in (("left", left), ("right", right), ("keys", keys)):
                if some.size and not (0 <= some.min() and some.max() < count):
                    raise ValueError(f"{name} must index the plan's {count} base values")
        highest = int(positions.max()) if positions.size else 0
        if positions.size and positions.min() < 1 and ((positions < 1) & (positions != -1)).any():
            raise ValueError("a plan's positions are columns from 1 on, or -1 (no column)")
        plan = self._size
        if plan + 1 >= self._counts.size:
            self._counts, self._highest = (np.resize(a, 2 * a.size) for a in (self._counts, self._highest))
            for name in self._FIELDS:
                self._offsets[name] = np.resize(self._offsets[name], 2 * self._offsets[name].size)
        for name, values in zip(self._FIELDS, (positions, left, right, keys), strict=True):
            start = self._offsets[name][plan]
            stop = start + values.size
            if stop > self._data[name].size:
                self._data[name] = np.resize(self._data[name], max(2 * self._data[name].size, stop))
            self._data[name][start:stop] = values
            self._offsets[name][plan + 1] = stop
        self._counts[plan] = count
        self._highest[plan] = highest
        self._size = plan + 1
        return plan

    def base_values(self, plan_of_row: np.ndarray, columns: int) -> int:
        """How many base values rows of these plans take, checking that each plan is one of these and fits
        a model of ``columns`` columns."""
        if not plan_of_row.size:
            return 0
        if not (0 <= plan_of_row.min() and plan_of_row.max() < self._size):
            raise ValueError(f"a row's plan must be one of the {self._size} plans")
        if self._highest[plan_of_row].max() >= columns:
            raise ValueError(f"a row's plan has a position past the model's {columns} columns")
        return int(self._counts[plan_of_row].sum())

    def arrays(self) -> tuple[np.ndarray, ...]:
        """``positions, position_offsets, left, right, product_offsets, keys, copy_offsets`` (views)."""
        n = self._size
        positions, left, right, keys = (self._data[name] for name in self._FIELDS)
        offsets = self._offsets
        return (positions, offsets["positions"][: n + 1], left, right, offsets["left"][: n + 1], keys,
                offsets["keys"][: n + 1])


class _Run:
    """A model's state as the kernels take it (:meth:`arguments`), and written back (:meth:`finish`)."""

    def __init__(self, model: RLS):
        self.model = model
        self.left: tuple | None = None  # the model's fingerprint as finish left it
        if not model._s.flags.f_contiguous:
            model._s = np.asfortranarray(model._s)
        d = model._weights.size
        # from MIRROR_FROM columns on, the kernel reads rows of the upper triangle down the lower one,
        # and keeps it so
        self.mirrored = d >= MIRROR_FROM
        if self.mirrored:
            _mirror(model._s)
        self.weights = np.array(model._weights, dtype=float)  # learn_vector rebinds, never mutates, the weights
        self.state = np.array([model._scale, model._trace_s, model.n_updates, model.n_refused,
                               model.n_resets, 0.0, model.searched_at()])
        self.constrained = bool(model.non_negative_contention)
        if self.constrained:
            self.mask = model._constrained_columns()
            self.pinned = np.zeros(d, dtype=np.int64)
            self.gain = np.zeros((d, d))  # row-major: each row's sum over the pinned columns is contiguous
            found = model._gain
            if found is not None and found[0].size:
                active, matrix = found
                k = active.size
                self.pinned[:k] = active
                self.gain[: matrix.shape[0], :k] = matrix  # rows of columns added since: no covariance, 0
                self.state[_PINNED] = k
        else:
            self.mask = np.zeros(0, dtype=bool)
            self.pinned = np.zeros(0, dtype=np.int64)
            self.gain = np.zeros((0, 0))

    def arguments(self) -> tuple:
        """The kernels' arguments after the rows: the learning constants and the projection's state."""
        model = self.model
        return (float(model.forgetting), float(model.delta), float(model.trace_bound), RESCALE_ABOVE,
                self.mask, self.pinned, self.gain, *search_schedule(self.weights.size), self.mirrored)

    def finish(self) -> None:
        """Write the learned state back into the model."""
        model, state = self.model, self.state
        model._weights = self.weights
        model._scale, model._trace_s = float(state[_C]), float(state[_TRACE])
        updates, refused, resets = int(state[_UPDATES]), int(state[_REFUSED]), int(state[_RESETS])
        if self.constrained and int(state[_SEARCHED_AT]) != model.searched_at():
            k = int(state[_PINNED])
            model._gain = (self.pinned[:k].astype(np.intp), np.array(self.gain[:, :k]))
            model._searched_at = int(state[_SEARCHED_AT])
        model.n_updates, model.n_refused, model.n_resets = updates, refused, resets
        model._projected = None
        self.left = _fingerprint(model)

    def reopen(self) -> bool:
        """Take up a finished run for more blocks, its arrays as they were left, where the model is
        still as :meth:`finish` left it (nothing else learned, grew, restored or rebound it since);
        returns whether it could (else a fresh run reads the model)."""
        left = self.left
        if left is None:
            return False
        now = _fingerprint(self.model)
        self.left = None
        if not (all(a is b for a, b in zip(left[:_SHARED], now[:_SHARED], strict=True)) and left[_SHARED:] == now[_SHARED:]):
            return False
        self.weights = self.weights.copy()  # the model's, which a restore point may share: never written in place
        return True


_SHARED = 4
"""The first items of a :func:`_fingerprint` that are compared by identity."""


def _fingerprint(model: RLS) -> tuple:
    """What a finished run's arrays mirror, as the model stands: the arrays and objects learning,
    growth or a restore rebind (by identity), then the counts and scalars learning moves."""
    return (model._weights, model._s, model._gain, model.index, model._weights.size, len(model.index.columns),
            model._scale, model._trace_s, model.n_updates, model.n_refused, model.n_resets, model.searched_at(),
            model.non_negative_contention)


def learn_rows(model: RLS, rows: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """:meth:`RLS.learn_vector` of each scaled row in order; returns each row's prediction before its step
    (:meth:`RLS.predict_vector`: with ``non_negative_contention``, from the projected weights).

    Parameters
    ----------
    model
        The learner, updated in place. Every row must have the model's current
        size (no new column) and come from :meth:`RLS.vectorize` (scaled).
    rows
        ``n x d`` scaled vectors.
    targets
        ``n`` targets.
    """
    return learn_rows_fits(model, rows, targets)[0]


def learn_rows_fits(model: RLS, rows: np.ndarray, targets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`learn_rows`, also returning each row's unconstrained fit ``x'w`` before its step
    (the same as the prediction unless ``non_negative_contention``)."""
    rows = np.ascontiguousarray(rows, dtype=float)
    targets = np.ascontiguousarray(targets, dtype=float)
    d = model._weights.size
    if rows.ndim != 2 or rows.shape[1] != d or targets.shape != (rows.shape[0],):
        raise ValueError(f"rows must be n x {d} with n targets, got {rows.shape} and {targets.shape}")
    predictions, fits = np.empty(rows.shape[0]), np.empty(rows.shape[0])
    if not rows.shape[0]:
        return predictions, fits
    run = _Run(model)
    _rls_rows(model._s, run.weights, run.state, rows, targets, *run.arguments(), predictions, fits)
    run.finish()
    return predictions, fits


class PlannedRun:
    """A model learned over successive blocks of rows given by plans (:class:`RowPlans`), each block in
    one compiled call (:meth:`PlannedBlock.compute`, which releases the GIL and may run on another
    thread: :class:`~predictor.runtime.kernel_thread.KernelThread`).

    The model's state is read once, held by the run from block to block and written back by
    :meth:`finish`: until then the model's weights and covariance are the run's to write, and nothing
    else may read or learn on them (its feature index and column scales, which the kernel leaves, may
    be read). Blocks are learned in the order they are made, one at a time.
    """

    def __init__(self, model: RLS):
        self.model = model
        self._run: _Run | None = _Run(model)
        self._left: _Run | None = None  # the run finished, until taken up again (reopen)

    def block(self, plans: RowPlans, plan_of_row: np.ndarray, bases: np.ndarray,
              targets: np.ndarray, extras: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> PlannedBlock:
        """The next block: row ``t`` follows plan ``plan_of_row[t]`` from its base values, the next ones
        of ``bases``; every row must fit the model as it is (no new column, a non-zero value only
        where the column has its scale: see :func:`scaled_row`).

        ``extras``: ``offsets, columns, values``: row ``t`` also has ``values[offsets[t]:offsets[t + 1]]``
        at ``columns[offsets[t]:offsets[t + 1]]`` (distinct, and none among its plan's positions): the
        values a plan does not hold, such as the model-identity features
        (:func:`~predictor.features.extract.planned_parts`)."""
        if self._run is None:
            raise RuntimeError("the run is finished")
        plan_of_row, bases = np.asarray(plan_of_row, dtype=np.int64), np.asarray(bases, dtype=float)
        targets = np.asarray(targets, dtype=float)
        if plan_of_row.shape != targets.shape:
            raise ValueError(f"{plan_of_row.size} rows' plans for {targets.size} targets")
        d = self.model._weights.size
        taken = plans.base_values(plan_of_row, d)
        if bases.size != taken:
            raise ValueError(f"the rows' plans take {taken} base values, got {bases.size}")
        offsets, columns, values = _extras(extras, targets.size, d)
        run, model = self._run, self.model
        return PlannedBlock((model._s, run.weights, run.state, model._column_scale, plan_of_row, bases, offsets,
                             columns, values, *plans.arrays(), targets, *run.arguments()), targets.size)

    def finish(self) -> None:
        """Write the learned state back into the model (after the last block's :meth:`~PlannedBlock.compute`)."""
        if self._run is not None:
            self._run.finish()
            self._run, self._left = None, self._run

    def reopen(self) -> bool:
        """Take up the finished run for more blocks where nothing but it changed the model since
        (:meth:`_Run.reopen`): its arrays are not read from the model again. Returns whether it could."""
        run, self._left = self._left, None
        if run is None or not run.reopen():
            return False
        self._run = run
        return True


def _extras(extras: tuple[np.ndarray, np.ndarray, np.ndarray] | None, rows: int,
            columns: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:meth:`PlannedRun.block`'s ``extras`` as the kernel takes them, checked (``None``: none)."""
    if extras is None:
        return np.zeros(rows + 1, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0)
    offsets, at, values = (np.asarray(extras[0], dtype=np.int64), np.asarray(extras[1], dtype=np.int64),
                           np.asarray(extras[2], dtype=float))
    if offsets.shape != (rows + 1,) or offsets[0] != 0 or (np.diff(offsets) < 0).any() or offsets[-1] != at.size:
        raise ValueError(f"extras' offsets must rise from 0 to their {at.size} columns, one per row and one more")
    if at.shape != values.shape or (at.size and not (1 <= at.min() and at.max() < columns)):
        raise ValueError(f"extras' columns must be columns 1 to {columns - 1}, one per value")
    return offsets, at, values


class PlannedBlock:
    """A block of :class:`PlannedRun`: :meth:`compute` learns it; then ``predictions`` holds each row's
    prediction before its step (from the projected weights) and ``fits`` its unconstrained fit ``x'w``."""

    def __init__(self, arguments: tuple, size: int):
        self.predictions, self.fits = np.empty(size), np.empty(size)
        self._arguments = (*arguments, self.predictions, self.fits)

    def compute(self) -> None:
        """Learn the block (the compiled call; the GIL released)."""
        if self.predictions.size:
            _rls_planned(*self._arguments)


def scaled_row(model: RLS, names: tuple[str, ...], values: np.ndarray) -> np.ndarray | None:
    """The scaled vector :meth:`RLS.vectorize` (``grow=True``) gives for ``dict(zip(names, values))``,
    or ``None`` where that call would change the model (a new name, a column's first non-zero value)."""
    positions = model.index.cached_positions(names)
    size = model._weights.size
    if positions is None or model.index.size != size:
        return None
    scale = model._column_scale[positions]
    unscaled = scale <= 0
    if unscaled.any():
        if (values[unscaled] != 0).any():
            return None
        scale = np.where(unscaled, np.inf, scale)
    row = np.zeros(size)
    row[0] = 1.0 / model._column_scale[0] if model._column_scale[0] > 0 else 0.0
    row[positions] = values / scale
    return row


def _scaled_rest(model: RLS, names: tuple[str, ...], values: np.ndarray) -> np.ndarray | None:
    """:func:`scaled_row` of every row at once, where every column of ``names`` has its scale already."""
    positions = model.index.cached_positions(names)
    size = model._weights.size
    if positions is None or model.index.size != size or not (model._column_scale > 0).all():
        return None
    rows = np.zeros((values.shape[0], size))
    rows[:, 0] = 1.0 / model._column_scale[0]
    rows[:, positions] = values / model._column_scale[positions]
    return rows


def learn_block(model: RLS, names: tuple[str, ...], values: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Learn ``targets`` from rows of the features ``names`` (``values``: ``n x len(names)``), in order.

    The same state as :meth:`RLS.learn_one` of each row's dict in turn: rows the
    kernel can take (:func:`scaled_row`) are learned in compiled runs, the others
    (which grow the model) one at a time by the reference class. Returns each
    row's prediction before its step (on the scaled vector, as ``predict_vector``).
    """
    values = np.asarray(values, dtype=float)
    predictions = np.empty(values.shape[0])
    pending: list[np.ndarray] = []
    start = 0

    def flush(stop: int) -> None:
        if pending:
            predictions[start:stop] = learn_rows(model, np.stack(pending), targets[start:stop])
            pending.clear()

    for t in range(values.shape[0]):
        rest = _scaled_rest(model, names, values[t:])
        if rest is not None:  # every remaining row fits the model as it is: one compiled run
            flush(t)
            predictions[t:] = learn_rows(model, rest, targets[t:])
            return predictions
        row = scaled_row(model, names, values[t])
        if row is None:
            flush(t)
            vector = model.vectorize(dict(zip(names, values[t].tolist(), strict=True)), grow=True)
            predictions[t] = model.predict_vector(vector)
            model.learn_vector(vector, float(targets[t]))
            start = t + 1
            continue
        pending.append(row)
    flush(values.shape[0])
    return predictions

"""The per-shape calibrator's sequential walk over a block of outcomes, compiled (numba).

:meth:`ShapeCalibrator.score <predictor.calibration.shape.ShapeCalibrator.score>` and
:meth:`~predictor.calibration.shape.ShapeCalibrator.add`, per outcome, walk the cells a bound
is read from (every count ``0..k`` and nested shape, each stand-in, linked then replayed, the
device kind then the pool), read a conformal quantile of each window at every level adaptive
conformal inference tracks, move the levels, then insert the normalised residual in four
windows and update three running spreads (a bound's term of a linked cell reads the replayed
cells' spreads after its own). :func:`learn_block` runs the same steps, in the same
order and the same floating-point operations, over a block of outcomes whose cells were
numbered once (:mod:`predictor.calibration.shape_block` numbers them and copies the state in and out):
the results are equal bit for bit (``tests/calibration/test_shape_block.py``).

The state, by number: windows (``win_len``; where one exists, its row ``win_row`` of the sorted values
``win_sorted`` and of the arrival order ``win_ring`` from ``win_head``), spreads (``sp_m``, ``sp_s``,
``sp_n``), adaptive levels (``al``, ``al_exists``). A *plan* is the list of terms of the bounds of
one ``(shape, kind, count)``, for any model; a term the list of its lookups (window, alpha cell, spread
keys, source) and of the widest cells it falls back on. A spread key ``-1 - j`` stands for the
model's own ``j``-th spread, the item's ``own[base + j]``. Compiled on first use and cached on disk
(``cache=True``), in strict IEEE order (no ``fastmath``).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

WRITTEN_SPREADS = 3
"""The spreads an outcome updates: the first of its keys (its spread keys are three, given twice)."""

DEVICE_KIND, POOLED, FALLBACK = 0, 1, 2
"""Source codes of a term (the order of :class:`~predictor.calibration.conformal.BoundSource`)."""


@njit(cache=True, nogil=True)
def _spread(ids, own, base, sp_m, sp_s, sp_n, min_spread_n, scaled, min_spread):
    """``ShapeCalibrator._spread`` over the spread numbers ``ids`` (in order of preference; ``-1 - j``:
    the model's own ``own[base + j]``)."""
    if not scaled:
        return 0.0, 1.0
    for j in range(ids.shape[0]):
        k = ids[j]
        if k < 0:
            k = own[base - 1 - k]
        if sp_n[k] >= min_spread_n:
            return sp_m[k], max(sp_s[k], min_spread)
    return 0.0, 1.0


@njit(cache=True, nogil=True)
def _level(plan, base, onem_c, ai, denom, fallback_lf, tm_lf, tm_m, tm_src,
           plan_start, term_look, term_wide, lk_win, lk_alpha, lk_spread, lk_src, wd_win, wd_spread, own,
           win_row, win_len, win_sorted, sp_m, sp_s, sp_n, al, al_exists, min_residuals, min_spread_n, scaled,
           min_spread, noise):
    """The bound of one plan for the model whose own spreads start at ``own[base]``, at one level
    (``ShapeCalibrator._terms`` then ``_point_centre``, ``_centre`` and ``_largest``): the log correction
    (each centre shrunk by ``noise``), the log factor, and the source and residual count of the
    query's own (last) term. ``tm_*``: scratch room for the terms."""
    first, last = plan_start[plan], plan_start[plan + 1]
    centre = 0.0
    point = 0.0
    any_learned = False
    own_n = 0
    for t in range(first, last):
        lf, m, s, src, n = fallback_lf, 0.0, 0.0, FALLBACK, 0
        found = False
        for q in range(term_look[t], term_look[t + 1]):
            w = lk_win[q]
            size = win_len[w]
            if size < min_residuals:
                continue
            a = lk_alpha[q]
            phi = al[a, ai] / denom if al_exists[a] else 1.0
            level = min(max(1.0 - onem_c * phi, 1e-6), 1.0 - 1e-9)
            k = max(1, int(math.ceil((size + 1) * level - 1e-9)))
            if k > size:
                continue
            m, s = _spread(lk_spread[q], own, base, sp_m, sp_s, sp_n, min_spread_n, scaled, min_spread)
            lf, src, n = m + s * win_sorted[win_row[w], k - 1], lk_src[q], size
            found = True
            break
        if not found:
            for q in range(term_wide[t], term_wide[t + 1]):
                w = wd_win[q]
                size = win_len[w]
                if size >= min_residuals:
                    m, s = _spread(wd_spread[q], own, base, sp_m, sp_s, sp_n, min_spread_n, scaled, min_spread)
                    lf, src, n = m + s * win_sorted[win_row[w], size - 1], POOLED, size
                    break
        at = t - first
        tm_lf[at], tm_m[at], tm_src[at] = lf, m, src
        if src != FALLBACK:
            shrunk = math.copysign(max(abs(m) - noise * s, 0.0), m)
            if not any_learned or m > centre:
                centre = m
            if not any_learned or shrunk > point:
                point = shrunk
            any_learned = True
        own_n = n
    own_term = last - 1 - first
    if not any_learned:
        centre = tm_m[own_term]
    widest = 0.0
    any_width = False
    for at in range(last - first):
        if tm_src[at] != FALLBACK or at == own_term:
            width = tm_lf[at] - tm_m[at]
            if not any_width or width > widest:
                widest = width
            any_width = True
    return point, centre + widest, tm_src[own_term], own_n


@njit(cache=True, nogil=True)
def _insert(r, n, value, win_sorted, win_ring, win_head, capacity):
    """``ResidualWindow.add`` of the window in row ``r`` holding ``n`` residuals: evict the oldest when
    full (``bisect_left`` of it in the sorted values), append, insert sorted (``insort_right``); the
    window's new length."""
    row = win_sorted[r]
    if n == capacity:
        oldest = win_ring[r, win_head[r]]
        lo, hi = 0, n
        while lo < hi:  # bisect_left
            mid = (lo + hi) // 2
            if row[mid] < oldest:
                lo = mid + 1
            else:
                hi = mid
        for j in range(lo, n - 1):
            row[j] = row[j + 1]
        n -= 1
        win_ring[r, win_head[r]] = value
        win_head[r] = (win_head[r] + 1) % capacity
    else:
        win_ring[r, (win_head[r] + n) % capacity] = value
    lo, hi = 0, n
    while lo < hi:  # bisect_right
        mid = (lo + hi) // 2
        if value < row[mid]:
            hi = mid
        else:
            lo = mid + 1
    for j in range(n, lo, -1):
        row[j] = row[j - 1]
    row[lo] = value
    return n + 1


@njit(cache=True, nogil=True)
def learn_block(win_row, win_len, win_sorted, win_ring, win_head, win_pool, win_added, n_rows,
                sp_exists, sp_m, sp_s, sp_n, sp_pool, al_exists, al, al_init, sizes, created, n_created,
                plan_start, term_look, term_wide, lk_win, lk_alpha, lk_spread, lk_src, wd_win, wd_spread, own,
                tm_lf, tm_m, tm_src,
                it_plan, it_own, it_resid, it_score, it_win, it_spread, it_alpha, it_out, it_onem, it_ai, it_denom,
                it_fallback, grid_onem, grid_fallback, ad_gamma, ad_lo, ad_hi,
                adapt, scaled, min_residuals, min_spread_n, max_cells, spread_rate, min_spread,
                out_centre, out_lf, out_src, out_n, noise):
    """``score`` (items with ``it_score``) or ``add`` (the others) of each item in order.

    Item ``i``'s bound is plan ``it_plan[i]`` with its model's own spreads from ``own[it_own[i]]``.
    Levels ``0 .. len(grid) - 1`` of an item are the grid's, level ``len(grid)`` its own
    confidence when it is not one of them (``it_onem``, ``it_ai``, ``it_denom``,
    ``it_fallback``); ``it_out`` says at which its answer (``out_*``) is read. ``sizes`` holds
    the numbers of windows, spreads and alpha cells the calibrator has (its caps count them)
    and is kept up to date; ``created[j]`` lists, in order, the numbers of the windows
    (``j = 0``), spreads (1) and alpha cells (2) made here, ``n_created[j]`` of them. A window made
    here takes row ``n_rows[0]`` (then counted on); ``win_added`` counts each window's new residuals.
    ``tm_*``: scratch room for the terms of the longest plan.
    """
    capacity = win_sorted.shape[1]
    n_grid = grid_onem.shape[0]
    largest = np.empty(n_grid)
    srcs = np.empty(n_grid, dtype=np.int64)
    for i in range(it_plan.shape[0]):
        plan = it_plan[i]
        base = it_own[i]
        residual = it_resid[i]
        a = it_alpha[i]
        adapting = adapt and win_len[it_win[i, 0]] >= min_residuals and (al_exists[a] or sizes[2] < max_cells)
        for g in range(n_grid + 1):
            wanted = it_score[i] and it_out[i] == g
            if not (wanted or (adapting and g < n_grid)):
                continue
            if g < n_grid:
                c, lf, src, n = _level(plan, base, grid_onem[g], g, grid_onem[g], grid_fallback[g], tm_lf, tm_m,
                                       tm_src, plan_start, term_look, term_wide, lk_win, lk_alpha, lk_spread, lk_src,
                                       wd_win, wd_spread, own, win_row, win_len, win_sorted, sp_m, sp_s, sp_n, al,
                                       al_exists, min_residuals, min_spread_n, scaled, min_spread, noise)
                largest[g], srcs[g] = lf, src
            else:
                c, lf, src, n = _level(plan, base, it_onem[i], it_ai[i], it_denom[i], it_fallback[i], tm_lf, tm_m,
                                       tm_src, plan_start, term_look, term_wide, lk_win, lk_alpha, lk_spread, lk_src,
                                       wd_win, wd_spread, own, win_row, win_len, win_sorted, sp_m, sp_s, sp_n, al,
                                       al_exists, min_residuals, min_spread_n, scaled, min_spread, noise)
            if wanted:
                out_centre[i], out_lf[i], out_src[i], out_n[i] = c, lf, src, n
        if adapting:
            if not al_exists[a]:
                al_exists[a] = True
                for g in range(n_grid):
                    al[a, g] = al_init[g]
                sizes[2] += 1
                created[2, n_created[2]] = a
                n_created[2] += 1
            for g in range(n_grid):
                if srcs[g] == FALLBACK:
                    continue
                missed = 1.0 if residual > largest[g] else 0.0
                al[a, g] = min(max(al[a, g] + ad_gamma[g] * (grid_onem[g] - missed), ad_lo[g]), ad_hi[g])
        m, s = _spread(it_spread[i], own, 0, sp_m, sp_s, sp_n, min_spread_n, scaled, min_spread)
        score = (residual - m) / s
        for j in range(it_win.shape[1]):
            w = it_win[i, j]
            r = win_row[w]
            if r < 0:
                if sizes[0] >= max_cells and not win_pool[w]:
                    continue
                r = win_row[w] = n_rows[0]
                n_rows[0] += 1
                win_head[r] = 0
                sizes[0] += 1
                created[0, n_created[0]] = w
                n_created[0] += 1
            win_len[w] = _insert(r, win_len[w], score, win_sorted, win_ring, win_head, capacity)
            win_added[w] += 1
        for j in range(WRITTEN_SPREADS):  # (an outcome's three, given twice)
            k = it_spread[i, j]
            if not sp_exists[k]:
                if sizes[1] >= 4 * max_cells and not sp_pool[k]:
                    continue
                sp_exists[k] = True
                sizes[1] += 1
                created[1, n_created[1]] = k
                n_created[1] += 1
            n = sp_n[k]
            rate = max(spread_rate, 1.0 / (n + 1))
            deviation = abs(residual - sp_m[k]) if n else 0.0
            sp_m[k] += rate * (residual - sp_m[k])
            if n:
                b = max(spread_rate, 1.0 / n)
                sp_s[k] += b * (deviation - sp_s[k])
            sp_n[k] = n + 1

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

The state, by number: windows (``win_len``, sorted values ``win_sorted``, arrival order
``win_ring`` from ``win_head``), spreads (``sp_m``, ``sp_s``, ``sp_n``), adaptive levels
(``al``, ``al_exists``). A *plan* is the list of terms of one ``(shape, kind, count, model)``
bound; a term the list of its lookups (window, alpha cell, spread keys, source) and of the
widest cells it falls back on. Compiled on first use and cached on disk (``cache=True``), in
strict IEEE order (no ``fastmath``).
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
def _spread(ids, sp_m, sp_s, sp_n, min_spread_n, scaled, min_spread):
    """``ShapeCalibrator._spread`` over the spread numbers ``ids`` (in order of preference)."""
    if not scaled:
        return 0.0, 1.0
    for j in range(ids.shape[0]):
        k = ids[j]
        if sp_n[k] >= min_spread_n:
            return sp_m[k], max(sp_s[k], min_spread)
    return 0.0, 1.0


@njit(cache=True, nogil=True)
def _level(plan, onem_c, ai, denom, fallback_lf, tm_lf, tm_m, tm_src,
           plan_start, term_look, term_wide, lk_win, lk_alpha, lk_spread, lk_src, wd_win, wd_spread,
           win_len, win_sorted, sp_m, sp_s, sp_n, al, al_exists, min_residuals, min_spread_n, scaled, min_spread,
           noise):
    """The bound of one plan at one level (``ShapeCalibrator._terms`` then ``_point_centre``, ``_centre``
    and ``_largest``): the log correction (each centre shrunk by ``noise``), the log factor, and the
    source and residual count of the query's own (last) term. ``tm_*``: scratch room for the terms."""
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
            m, s = _spread(lk_spread[q], sp_m, sp_s, sp_n, min_spread_n, scaled, min_spread)
            lf, src, n = m + s * win_sorted[w, k - 1], lk_src[q], size
            found = True
            break
        if not found:
            for q in range(term_wide[t], term_wide[t + 1]):
                w = wd_win[q]
                size = win_len[w]
                if size >= min_residuals:
                    m, s = _spread(wd_spread[q], sp_m, sp_s, sp_n, min_spread_n, scaled, min_spread)
                    lf, src, n = m + s * win_sorted[w, size - 1], POOLED, size
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
    own = last - 1 - first
    if not any_learned:
        centre = tm_m[own]
    widest = 0.0
    any_width = False
    for at in range(last - first):
        if tm_src[at] != FALLBACK or at == own:
            width = tm_lf[at] - tm_m[at]
            if not any_width or width > widest:
                widest = width
            any_width = True
    return point, centre + widest, tm_src[own], own_n


@njit(cache=True, nogil=True)
def _insert(w, value, win_len, win_sorted, win_ring, win_head, capacity):
    """``ResidualWindow.add`` of window ``w``: evict the oldest when full (``bisect_left`` of it
    in the sorted values), append, insert sorted (``insort_right``)."""
    n = win_len[w]
    row = win_sorted[w]
    if n == capacity:
        oldest = win_ring[w, win_head[w]]
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
        win_ring[w, win_head[w]] = value
        win_head[w] = (win_head[w] + 1) % capacity
    else:
        win_ring[w, (win_head[w] + n) % capacity] = value
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
    win_len[w] = n + 1


@njit(cache=True, nogil=True)
def learn_block(win_exists, win_len, win_sorted, win_ring, win_head, win_pool, win_added,
                sp_exists, sp_m, sp_s, sp_n, sp_pool, al_exists, al, al_init, sizes, created, n_created,
                plan_start, term_look, term_wide, lk_win, lk_alpha, lk_spread, lk_src, wd_win, wd_spread,
                it_plan, it_resid, it_score, it_win, it_spread, it_alpha, it_out, it_onem, it_ai, it_denom,
                it_fallback, grid_onem, grid_fallback, ad_gamma, ad_lo, ad_hi,
                adapt, scaled, min_residuals, min_spread_n, max_cells, spread_rate, min_spread,
                out_centre, out_lf, out_src, out_n, noise):
    """``score`` (items with ``it_score``) or ``add`` (the others) of each item in order.

    Levels ``0 .. len(grid) - 1`` of an item are the grid's, level ``len(grid)`` its own
    confidence when it is not one of them (``it_onem``, ``it_ai``, ``it_denom``,
    ``it_fallback``); ``it_out`` says at which its answer (``out_*``) is read. ``sizes`` holds
    the numbers of windows, spreads and alpha cells the calibrator has (its caps count them)
    and is kept up to date; ``created[j]`` lists, in order, the numbers of the windows
    (``j = 0``), spreads (1) and alpha cells (2) made here, ``n_created[j]`` of them.
    """
    capacity = win_sorted.shape[1]
    n_grid = grid_onem.shape[0]
    largest = np.empty(n_grid)
    srcs = np.empty(n_grid, dtype=np.int64)
    most = 1
    for p in range(plan_start.shape[0] - 1):
        most = max(most, plan_start[p + 1] - plan_start[p])
    tm_lf = np.empty(most)
    tm_m = np.empty(most)
    tm_src = np.empty(most, dtype=np.int64)
    for i in range(it_plan.shape[0]):
        plan = it_plan[i]
        residual = it_resid[i]
        a = it_alpha[i]
        adapting = adapt and win_len[it_win[i, 0]] >= min_residuals and (al_exists[a] or sizes[2] < max_cells)
        for g in range(n_grid + 1):
            wanted = it_score[i] and it_out[i] == g
            if not (wanted or (adapting and g < n_grid)):
                continue
            if g < n_grid:
                c, lf, src, n = _level(plan, grid_onem[g], g, grid_onem[g], grid_fallback[g], tm_lf, tm_m, tm_src,
                                       plan_start, term_look, term_wide, lk_win, lk_alpha, lk_spread, lk_src,
                                       wd_win, wd_spread, win_len, win_sorted, sp_m, sp_s, sp_n, al, al_exists,
                                       min_residuals, min_spread_n, scaled, min_spread, noise)
                largest[g], srcs[g] = lf, src
            else:
                c, lf, src, n = _level(plan, it_onem[i], it_ai[i], it_denom[i], it_fallback[i], tm_lf, tm_m, tm_src,
                                       plan_start, term_look, term_wide, lk_win, lk_alpha, lk_spread, lk_src,
                                       wd_win, wd_spread, win_len, win_sorted, sp_m, sp_s, sp_n, al, al_exists,
                                       min_residuals, min_spread_n, scaled, min_spread, noise)
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
        m, s = _spread(it_spread[i], sp_m, sp_s, sp_n, min_spread_n, scaled, min_spread)
        score = (residual - m) / s
        for j in range(it_win.shape[1]):
            w = it_win[i, j]
            if not win_exists[w]:
                if sizes[0] >= max_cells and not win_pool[w]:
                    continue
                win_exists[w] = True
                sizes[0] += 1
                created[0, n_created[0]] = w
                n_created[0] += 1
            _insert(w, score, win_len, win_sorted, win_ring, win_head, capacity)
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

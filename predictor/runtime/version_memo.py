"""What a published (frozen) model computes again and again from its unchanging state, remembered.

A frozen predictor (:meth:`~predictor.predictors.base.LatencyPredictor.frozen`, what the
service's answers read) never learns, so whatever it derives from its state for a tuple of
feature names (each name's weight, its largest magnitude seen, their quotient) is the same at
every call. Every answer asks it anew for the names of its rows: :func:`memoised` keeps the
result in the frozen copy's own dict, keyed by what was asked, so that the next answer with the
same names reads it. A live (learning) predictor holds no memo (``None``) and computes every
time. A memo holds at most :data:`MEMO_MOST` entries (it starts over when full). What it keeps is
shared by every caller, so a caller never changes it in place (left writable: a read-only array is
another type to the compiled kernels that read it, compiled again on first use).

Examples
--------
>>> calls = []
>>> memo = {}
>>> def compute():
...     calls.append(1)
...     return 2.0
>>> memoised(memo, ("x",), compute), memoised(memo, ("x",), compute), len(calls)
(2.0, 2.0, 1)
>>> memoised(None, ("x",), compute), len(calls)
(2.0, 2)
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TypeVar

T = TypeVar("T")

MEMO_MOST = 512
"""Entries a frozen model's memo holds before it starts over."""

_MISSING = object()


def memoised(memo: dict | None, key: Hashable, compute: Callable[[], T]) -> T:
    """``compute()``, remembered in ``memo`` under ``key`` (``None``: nothing remembered, a live
    model's)."""
    if memo is None:
        return compute()
    found = memo.get(key, _MISSING)
    if found is _MISSING:
        found = compute()
        if len(memo) >= MEMO_MOST:
            memo.clear()
        memo[key] = found
    return found  # type: ignore[return-value]


def pickled(state: dict) -> dict:
    """``state`` (an object's ``__dict__``, copied) as pickled: a frozen copy's memo made anew (it stays
    a frozen copy; what it remembered is not written), a learning object's left as it is."""
    if "_memo" in state:
        state["_memo"] = {}
    return state

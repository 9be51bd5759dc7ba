"""Keeping absurd observations out of the model: an outlier gate.

An observation whose latency is off the current prediction by more than
``max(k * MAD, log(min_ratio))`` in log space (MAD: median absolute
deviation of recently *admitted* log residuals) is not learned from. The
scale is estimated from admitted observations only, so a burst of poisoned
values cannot widen the gate that keeps them out.

A real change of regime looks like a burst of outliers too. The gate lets
one through when, over the last ``escape_window`` decisions, at least
``escape_fraction`` were rejections *and* they came from at least
``escape_sources`` distinct sources: one client alone cannot force its
values in, while a change every reporter sees is learned.

Examples
--------
>>> gate = OutlierGate(warmup=3)
>>> [gate.admit(10.0, v, "a") for v in (10.0, 10.5, 9.8, 10.1)]
[True, True, True, True]
>>> gate.admit(10.0, 1000.0, "a"), gate.n_rejected
(False, 1)
"""

from __future__ import annotations

import bisect
import math
from collections import deque

import numpy as np

_KEPT, _RECENT, _ESCAPED = "kept", "recent", "escaped"
"""The changes a mark notes (:meth:`OutlierGate.mark`): a residual kept (and the one it evicted), a
decision kept (and the one it evicted), an escape (the windows it cleared)."""


class OutlierGate:
    """Admit or reject observations by their residual against the prediction.

    Parameters
    ----------
    k
        Rejection threshold in MADs of recent admitted log residuals.
    min_ratio
        Never reject an observation within this factor of the prediction.
    warmup
        Admit everything until this many observations were admitted.
    window
        Admitted residuals kept for the MAD.
    escape_window, escape_fraction, escape_sources
        When to accept a persistent shift (see the module docstring).
    """

    def __init__(
        self,
        k: float = 8.0,
        min_ratio: float = 2.0,
        warmup: int = 50,
        window: int = 512,
        escape_window: int = 200,
        escape_fraction: float = 0.8,
        escape_sources: int = 2,
    ):
        if not k > 0:
            raise ValueError(f"k must be > 0, got {k!r}")
        if not min_ratio > 1:
            raise ValueError(f"min_ratio must be > 1, got {min_ratio!r}")
        self.k = k
        self.min_ratio = min_ratio
        self.warmup = warmup
        self.escape_fraction = escape_fraction
        self.escape_sources = escape_sources
        self._residuals: deque[float] = deque(maxlen=window)
        self._sorted: list[float] = []  # the window, sorted (see _ordered)
        self._recent: deque[tuple[bool, str]] = deque(maxlen=escape_window)
        self._threshold = math.inf
        self._since_refresh = 0
        self.n_admitted = 0
        self.n_rejected = 0
        self.n_escapes = 0

    JOURNAL_MOST = 65_536
    """Changes a mark notes at most (beyond, it is dropped: see :meth:`rewind`)."""

    _marks: tuple[list, ...] = ()  # the open marks (none in gates pickled before marks)

    def mark(self) -> list:
        """Start noting what :meth:`admit` changes, so that :meth:`rewind` of the mark returned brings
        the gate back to its state now; it stays open until rewound or let go (:meth:`release`)."""
        undo = [(self.n_admitted, self.n_rejected, self.n_escapes, self._threshold, self._since_refresh)]
        self._marks = (*self._marks, undo)
        return undo

    def release(self, mark: list) -> None:
        """Stop noting changes for ``mark`` (it will not be rewound)."""
        self._marks = tuple(open_ for open_ in self._marks if open_ is not mark)

    def rewind(self, mark: list) -> None:
        """Bring the gate back to its state at ``mark`` (an open :meth:`mark`; used once): each change
        noted since undone, newest first. Every mark is closed by it."""
        if not any(open_ is mark for open_ in self._marks):
            raise RuntimeError("not an open mark of the gate (rewound or released, or it noted too many changes)")
        for entry in reversed(mark[1:]):
            if entry[0] is _KEPT:
                _, residual, evicted = entry
                self._residuals.pop()
                ordered = self._sorted
                del ordered[bisect.bisect_right(ordered, residual) - 1]
                if evicted is not None:
                    self._residuals.appendleft(evicted)
                    ordered.insert(bisect.bisect_left(ordered, evicted), evicted)
            elif entry[0] is _RECENT:
                self._recent.pop()
                if entry[1] is not None:
                    self._recent.appendleft(entry[1])
            else:  # _ESCAPED
                _, self._residuals, self._recent, self._sorted = entry
        self.n_admitted, self.n_rejected, self.n_escapes, self._threshold, self._since_refresh = mark[0]
        self._marks = ()

    def _note(self, entry: tuple) -> None:
        """Note a change in every open mark (a mark that noted too many is closed)."""
        marks = self._marks
        for undo in marks:
            undo.append(entry)
        if any(len(undo) > self.JOURNAL_MOST for undo in marks):
            self._marks = tuple(undo for undo in marks if len(undo) <= self.JOURNAL_MOST)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_marks", None)  # a mark is no state
        return state

    def _refresh(self) -> None:
        residuals = np.fromiter(self._residuals, dtype=float)
        mad = float(np.median(np.abs(residuals - np.median(residuals))))
        self._threshold = max(self.k * 1.4826 * mad, math.log(self.min_ratio))
        self._since_refresh = 0

    def threshold(self) -> float:
        """Current rejection threshold on |log(actual / predicted)|."""
        return self._threshold

    def admit(self, predicted_ms: float, actual_ms: float, source: str = "") -> bool:
        """Whether to learn from an observation; updates the gate's own state."""
        residual = math.log(actual_ms / predicted_ms)
        admitted = self.n_admitted < self.warmup or abs(residual - self._center()) <= self._threshold
        if not admitted and self._shift_seen_by_many(source):
            admitted = True
            if self._marks:
                self._note((_ESCAPED, self._residuals.copy(), self._recent.copy(), list(self._sorted)))
            self.n_escapes += 1
            self._residuals.clear()
            self._recent.clear()
        recent = self._recent
        if self._marks:
            self._note((_RECENT, recent[0] if len(recent) == recent.maxlen else None))
        recent.append((not admitted, source))
        if not admitted:
            self.n_rejected += 1
            return False
        self.n_admitted += 1
        self._keep(residual)
        self._since_refresh += 1
        if self.n_admitted >= self.warmup and (self._since_refresh >= 16 or math.isinf(self._threshold)):
            self._refresh()
        return True

    def _center(self) -> float:
        """The median of the admitted residuals (what ``np.median`` gives), from a sorted copy of
        the window kept alongside it (a median per observation costs no sort)."""
        residuals = self._residuals
        if not residuals:
            return 0.0
        ordered = self._ordered()
        n = len(ordered)
        middle = n // 2
        return ordered[middle] if n % 2 else (ordered[middle - 1] + ordered[middle]) / 2

    def _ordered(self) -> list[float]:
        """The window, sorted; kept in step with it (rebuilt when out of step: after an escape cleared the window)."""
        ordered = self._sorted
        if len(ordered) != len(self._residuals):
            ordered = self._sorted = sorted(self._residuals)
        return ordered

    def _keep(self, residual: float) -> None:
        """Append an admitted residual to the window and to its sorted copy."""
        ordered = self._ordered()
        evicted = None
        if len(self._residuals) == self._residuals.maxlen:
            evicted = self._residuals[0]
            del ordered[bisect.bisect_left(ordered, evicted)]
        if self._marks:
            self._note((_KEPT, residual, evicted))
        self._residuals.append(residual)
        bisect.insort(ordered, residual)

    def _shift_seen_by_many(self, source: str) -> bool:
        if len(self._recent) < self._recent.maxlen:  # type: ignore[operator]
            return False
        rejected = [s for was_rejected, s in self._recent if was_rejected]
        if len(rejected) < self.escape_fraction * len(self._recent):
            return False
        return len(set(rejected) | {source}) >= self.escape_sources

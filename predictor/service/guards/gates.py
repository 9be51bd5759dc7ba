"""Outlier gates per device kind: which observations the service refuses to learn from.

Wraps :class:`predictor.service.guards.robust.OutlierGate`, one per device kind (latency
residuals of an L4 and of a CPU need not share a scale), with a bound on the
number of kinds. A refused observation gets a reason in words.

Examples
--------
>>> gates = OutlierGates(warmup=3)
>>> [gates.check("cpu", 10.0, v, "a") for v in (10.0, 10.5, 9.8, 10.1)]
[None, None, None, None]
>>> gates.check("cpu", 10.0, 1000.0, "a")
'outlier: 1000 ms is 100x the predicted 10 ms, beyond the gate of 2x for device kind cpu; not learned'
>>> gates.n_rejected
1
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from predictor.service.guards.robust import OutlierGate


class OutlierGates:
    """An :class:`OutlierGate` per device kind.

    Parameters
    ----------
    k, min_ratio, warmup
        Arguments of each :class:`OutlierGate`.
    max_kinds
        Device kinds with their own gate; further kinds share one gate.
    """

    SHARED = "\0shared"

    def __init__(self, k: float = 8.0, min_ratio: float = 2.0, warmup: int = 50, max_kinds: int = 256):
        OutlierGate(k, min_ratio, warmup)  # validates the arguments
        self.k = k
        self.min_ratio = min_ratio
        self.warmup = warmup
        self.max_kinds = max_kinds
        self._gates: dict[str, OutlierGate] = {}
        self.n_rejected = 0

    def _gate(self, kind: str) -> OutlierGate:
        gate = self._gates.get(kind)
        if gate is None:
            if len(self._gates) >= self.max_kinds:
                kind = self.SHARED
                gate = self._gates.get(kind)
            if gate is None:
                gate = self._gates[kind] = OutlierGate(self.k, self.min_ratio, self.warmup)
        return gate

    def check(self, kind: str, predicted_ms: float, actual_ms: float, source: str = "") -> str | None:
        """``None`` to learn from the observation, else why not (the gate's state is updated)."""
        gate = self._gate(kind)
        if gate.admit(predicted_ms, actual_ms, source):
            return None
        self.n_rejected += 1
        ratio = actual_ms / predicted_ms
        shown = f"{ratio:.3g}x" if ratio >= 1 else f"1/{1 / ratio:.3g} of"
        return (
            f"outlier: {actual_ms:.6g} ms is {shown} the predicted {predicted_ms:.6g} ms, beyond the gate "
            f"of {math.exp(gate.threshold()):.3g}x for device kind {kind or '(none)'}; not learned"
        )

    def restore_point(self, kinds: Iterable[str] | None = None) -> tuple[int, dict[str, OutlierGate], list]:
        """The gates' state now, for :meth:`restore` to bring them back to after more checks (each gate
        notes its changes from now on: :meth:`OutlierGate.mark`); ``kinds``: the only device kinds
        checked meanwhile (only the gates they check are marked). :meth:`release` it where it will not
        be restored."""
        gates = self._gates
        if kinds is None:
            saved = list(gates.values())
        else:
            saved = list({id(gate): gate for gate in (gates.get(k, gates.get(self.SHARED)) for k in kinds)
                          if gate is not None}.values())
        return self.n_rejected, dict(gates), [(gate, gate.mark()) for gate in saved]

    def restore(self, point: tuple[int, dict[str, OutlierGate], list]) -> None:
        """Bring the gates back to the state of ``point`` (from :meth:`restore_point`, its marks still open; used
        once): the same gate objects, with the state they had; gates made since are dropped."""
        self.n_rejected, gates, saved = point
        for gate, mark in saved:
            gate.rewind(mark)
        self._gates = gates

    def release(self, point: tuple[int, dict[str, OutlierGate], list]) -> None:
        """Let the gates stop noting their changes for ``point`` (it will not be restored)."""
        for gate, mark in point[2]:
            gate.release(mark)

    def kinds(self) -> list[str]:
        """The device kinds that have their own gate (the shared gate of further kinds left out)."""
        return [k for k in self._gates if k != self.SHARED]

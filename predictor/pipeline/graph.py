"""A pipeline's DAG: validation, topological order, dominators and the split of an SLO over stages.

A pipeline is ``n`` stages and edges ``(u, v)`` ("``v`` starts when ``u`` has ended"). Its
end-to-end time is the longest path through it. :func:`split_deadline` shares a deadline out
over the stages so that along *every* path the shares add up to at most the deadline, and to
exactly the deadline on the heaviest path: the dominators of the sink (the stages every path
passes through) cut the DAG into serial segments; each segment gets the deadline in proportion
to its heaviest path, and a stage within a segment gets the segment's share in proportion to
its weight over the heaviest path through it inside the segment. (For any path ``P`` through a
segment, ``sum w_s / L(s) <= sum w_s / L(P) = 1``, as ``L(s) >= L(P)`` for ``s`` on ``P``.)

Examples
--------
>>> dag = Dag.of(4, [(0, 1), (0, 2), (1, 3), (2, 3)])
>>> dag.order, dag.sink_dominators(), dag.is_chain
([0, 1, 2, 3], [0, 3], False)
>>> [round(b, 6) for b in split_deadline(dag, [1.0, 2.0, 1.0, 1.0], 100.0)]
[25.0, 50.0, 50.0, 25.0]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


class GraphError(ValueError):
    """A malformed pipeline: ``field`` names the offending part of the request (``edges[2].to_stage``)."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True)
class Dag:
    """Stages ``0..n-1`` and their edges, validated and in topological order.

    Attributes
    ----------
    n
        Number of stages.
    preds, succs
        Per stage, its upstream and downstream stages (sorted, no duplicates).
    order
        A topological order (the smallest index first among the ready ones).
    """

    n: int
    preds: tuple[tuple[int, ...], ...]
    succs: tuple[tuple[int, ...], ...]
    order: list[int]

    @classmethod
    def of(cls, n: int, edges: Sequence[tuple[int, int]], field: str = "edges") -> Dag:
        """Validate ``edges`` over ``n`` stages (a :class:`GraphError` names ``field[i].from_stage``
        and so on); no edges with several stages: a chain in index order."""
        if n < 1:
            raise GraphError("stages", "give at least one stage")
        if not edges:
            edges = [(i, i + 1) for i in range(n - 1)]
        preds: list[set[int]] = [set() for _ in range(n)]
        succs: list[set[int]] = [set() for _ in range(n)]
        for i, (u, v) in enumerate(edges):
            for name, value in (("from_stage", u), ("to_stage", v)):
                if not 0 <= value < n:
                    raise GraphError(f"{field}[{i}].{name}", f"no stage {value} (there are {n})")
            if u == v:
                raise GraphError(f"{field}[{i}]", f"stage {u} cannot follow itself")
            preds[v].add(u)
            succs[u].add(v)
        order: list[int] = []
        indegree = [len(p) for p in preds]
        ready = sorted(i for i in range(n) if indegree[i] == 0)
        while ready:
            u = ready.pop(0)
            order.append(u)
            for v in sorted(succs[u]):
                indegree[v] -= 1
                if indegree[v] == 0:
                    ready.append(v)
            ready.sort()
        if len(order) < n:
            cycle = sorted(i for i in range(n) if indegree[i] > 0)
            raise GraphError(field, f"the edges form a cycle through stages {cycle}")
        return cls(n, tuple(tuple(sorted(p)) for p in preds), tuple(tuple(sorted(s)) for s in succs), order)

    @property
    def sources(self) -> list[int]:
        """Stages without upstream stages."""
        return [i for i in range(self.n) if not self.preds[i]]

    @property
    def sinks(self) -> list[int]:
        """Stages without downstream stages."""
        return [i for i in range(self.n) if not self.succs[i]]

    @property
    def is_chain(self) -> bool:
        """Whether the stages form one path (each at most one upstream and one downstream)."""
        return len(self.sources) == 1 and all(len(p) <= 1 for p in self.preds) and all(
            len(s) <= 1 for s in self.succs
        )

    def sink_dominators(self) -> list[int]:
        """The stages every source-to-sink path passes through, in topological order.

        Dominators from a virtual source before every source to a virtual sink after every sink:
        ``dom(v) = {v} | intersection of dom(u) over v's upstream stages``.
        """
        dom: list[frozenset[int]] = [frozenset()] * self.n
        for v in self.order:
            shared = frozenset.intersection(*(dom[u] for u in self.preds[v])) if self.preds[v] else frozenset()
            dom[v] = shared | {v}
        sinks = self.sinks
        common = frozenset.intersection(*(dom[s] for s in sinks))
        position = {v: i for i, v in enumerate(self.order)}
        return sorted(common, key=position.__getitem__)

    def longest_to(self, weights: Sequence[float]) -> list[float]:
        """Per stage, the heaviest path from a source up to and including it."""
        out = [0.0] * self.n
        for v in self.order:
            out[v] = weights[v] + max((out[u] for u in self.preds[v]), default=0.0)
        return out

    def critical_path(self, weights: Sequence[float]) -> list[int]:
        """The heaviest source-to-sink path (ties: the smallest index)."""
        to = self.longest_to(weights)
        v = max(self.sinks, key=lambda s: (to[s], -s))
        path = [v]
        while self.preds[v]:
            v = max(self.preds[v], key=lambda u: (to[u], -u))
            path.append(v)
        return path[::-1]

    def paths_sum_max(self, weights: Sequence[float]) -> float:
        """The heaviest path's total weight."""
        return max(self.longest_to(weights))


def split_deadline(dag: Dag, weights: Sequence[float], deadline_ms: float) -> list[float]:
    """Shares of ``deadline_ms`` per stage (see the module documentation): dominator segments in
    proportion to their heaviest path, stages within one in proportion to their weight over the
    heaviest path through them. Weights must be >= 0; all zero: equal weights."""
    w = [max(float(x), 0.0) for x in weights]
    if not any(w):
        w = [1.0] * dag.n
    tiny = 1e-12 * max(w)
    w = [max(x, tiny) for x in w]
    dominators = dag.sink_dominators()
    segment_of = _segments(dag, dominators)
    segments = sorted(set(segment_of))
    # heaviest path through each stage within its segment (edges across segments ignored)
    to = [0.0] * dag.n
    for v in dag.order:
        to[v] = w[v] + max((to[u] for u in dag.preds[v] if segment_of[u] == segment_of[v]), default=0.0)
    frm = [0.0] * dag.n
    for v in reversed(dag.order):
        frm[v] = w[v] + max((frm[u] for u in dag.succs[v] if segment_of[u] == segment_of[v]), default=0.0)
    heaviest = {g: max(to[v] for v in range(dag.n) if segment_of[v] == g) for g in segments}
    total = sum(heaviest.values())
    out = [0.0] * dag.n
    for v in range(dag.n):
        share = deadline_ms * heaviest[segment_of[v]] / total
        out[v] = share * w[v] / (to[v] + frm[v] - w[v])
    return out


def _segments(dag: Dag, dominators: list[int]) -> list[int]:
    """Per stage, its serial segment: each dominator is a segment of its own; the stages between
    two consecutive dominators (by topological position) share one."""
    position = {v: i for i, v in enumerate(dag.order)}
    cuts = [position[d] for d in dominators]
    out = [0] * dag.n
    for v in range(dag.n):
        p = position[v]
        segment = 0
        for j, c in enumerate(cuts):
            if p > c:
                segment = 2 * j + 2
            elif p == c:
                segment = 2 * j + 1
                break
            else:
                break
        out[v] = segment
    return out

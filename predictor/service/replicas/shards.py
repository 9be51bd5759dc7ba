"""Shards of the learning: which learner process owns which device kinds.

A shard is a set of device kinds (each kind's models, calibrators and gates must stay in one
learner). ``predictor serve --workers N --shard a100,h100 --shard cpu`` runs one learner per
``--shard``; kinds named by none belong to the first shard (and with no ``--shard`` at all, one
learner owns every kind).
"""

from __future__ import annotations

import contextvars
from collections.abc import Sequence
from dataclasses import dataclass, field

SHARD: contextvars.ContextVar[int] = contextvars.ContextVar("shard", default=0)
"""The shard whose published version the RPC being answered reads (set by the answering worker)."""


@dataclass(frozen=True)
class ShardMap:
    """Device kinds to shards.

    Attributes
    ----------
    kinds
        The device kinds named for each shard (the first shard also owns the kinds named by none).
    """

    kinds: tuple[frozenset[str], ...] = (frozenset(),)
    _owner: dict[str, int] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.kinds:
            raise ValueError("--shard: at least one shard is needed")
        for index, kinds in enumerate(self.kinds):
            for kind in kinds:
                if kind in self._owner:
                    raise ValueError(f"--shard: device kind {kind!r} is named by shards {self._owner[kind]} and {index}")
                self._owner[kind] = index

    @classmethod
    def parse(cls, specs: Sequence[str]) -> ShardMap:
        """From ``--shard`` values, each a comma-separated list of device kinds (none: one shard)."""
        shards = []
        for spec in specs:
            kinds = frozenset(k.strip() for k in spec.split(",") if k.strip())
            if not kinds:
                raise ValueError(f"--shard: {spec!r} names no device kind")
            shards.append(kinds)
        return cls(tuple(shards) or (frozenset(),))

    def __len__(self) -> int:
        return len(self.kinds)

    def shard_of(self, kind: str) -> int:
        """The shard that learns ``kind`` (the first shard for a kind named by none)."""
        return self._owner.get(kind, 0)

    def model_name(self, shard: int) -> str:
        """The name of the version file of ``shard``'s model."""
        return f"model-{shard}"

    def books_name(self, shard: int) -> str:
        """The name of the version file of ``shard``'s books (live view, queues, memory, transfers)."""
        return f"books-{shard}"

"""Many mappings of numbers that share their keys, held as one matrix.

The packed ``RankPlacements`` form sends the attributes of every co-runner (and the
signals of every candidate) as a key list and a row-major matrix, NaN where a row lacks
a key. :class:`KeyedMaps` keeps them so: it is a sequence of mappings (row ``i`` built
on demand, as the dict the classic form would give), and the column-wise consumers
(validation, feature layouts) read the matrix instead of walking dicts.

Examples
--------
>>> maps = KeyedMaps(("a", "b"), np.array([[1.0, np.nan], [2.0, 3.0]]))
>>> list(maps)
[{'a': 1.0}, {'a': 2.0, 'b': 3.0}]
>>> {k: (p.tolist(), v.tolist()) for k, (p, v) in maps.by_key().items()}
{'a': ([0, 1], [1.0, 2.0]), 'b': ([1], [3.0])}
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np


class KeyedMaps(Sequence[Mapping[str, float]]):
    """Rows of a ``rows x len(keys)`` matrix as mappings; NaN: the row lacks that key.

    Parameters
    ----------
    keys
        Distinct keys, the matrix's columns.
    matrix
        One row per mapping.
    """

    __slots__ = ("keys", "matrix", "_absent", "_rows")

    def __init__(self, keys: tuple[str, ...], matrix: np.ndarray):
        self.keys = tuple(keys)
        self.matrix = matrix.reshape(-1, len(self.keys)) if self.keys else matrix.reshape(len(matrix), 0)
        absent = np.isnan(self.matrix)
        self._absent = absent if absent.any() else None
        self._rows: list[dict[str, float]] | None = None

    def __len__(self) -> int:
        return self.matrix.shape[0]

    def _dicts(self) -> list[dict[str, float]]:
        if self._rows is None:
            keys = self.keys
            if self._absent is None:
                self._rows = [dict(zip(keys, row, strict=True)) for row in self.matrix.tolist()]
            else:
                self._rows = [{k: v for k, v, gone in zip(keys, row, missing, strict=True) if not gone}
                              for row, missing in zip(self.matrix.tolist(), self._absent.tolist(), strict=True)]
        return self._rows

    def __getitem__(self, i: Any) -> Any:
        if self._rows is not None or not isinstance(i, (int, np.integer)):
            return self._dicts()[i]
        row = self.matrix[i].tolist()  # one row alone, without building the others
        if self._absent is None:
            return dict(zip(self.keys, row, strict=True))
        return {k: v for k, v, gone in zip(self.keys, row, self._absent[i].tolist(), strict=True) if not gone}

    def __iter__(self) -> Iterator[Mapping[str, float]]:
        return iter(self._dicts())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence):
            return NotImplemented
        return list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"KeyedMaps({list(self)!r})"

    def present(self) -> np.ndarray:
        """The values given (every row's, row-major, absent ones left out)."""
        return self.matrix.ravel() if self._absent is None else self.matrix[~self._absent]

    def nonempty(self) -> np.ndarray:
        """Per row, whether its mapping has a key."""
        if self._absent is None:
            return np.full(len(self), bool(self.keys))
        return (~self._absent).any(axis=1)

    def most_keys(self) -> int:
        """The largest number of keys one mapping has."""
        if not len(self):
            return 0
        return len(self.keys) if self._absent is None else int((~self._absent).sum(axis=1).max())

    def by_key(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """For each key: the rows that have it (ascending) and its values there, keys in the order
        in which walking the mappings row by row first meets them."""
        if self._absent is None:
            rows = np.arange(len(self))
            return {k: (rows, self.matrix[:, j]) for j, k in enumerate(self.keys)} if len(self) else {}
        present = ~self._absent
        out = {}
        has = present.any(axis=0)
        first = np.where(has, present.argmax(axis=0), len(self))
        for j in sorted(np.flatnonzero(has).tolist(), key=lambda c: (first[c], c)):
            rows = np.flatnonzero(present[:, j])
            out[self.keys[j]] = (rows, self.matrix[rows, j])
        return out

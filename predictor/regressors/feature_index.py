"""A growing, bounded map from feature names to vector columns."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

MAX_LAYOUTS = 4096


class FeatureIndex:
    """Assigns each new feature name the next column, up to ``max_features``.

    Features beyond the cap are ignored (and counted in ``dropped``), so memory
    stays bounded however many distinct keys a stream carries. Column 0 is the
    intercept. The column positions of a recurring *set* of names (a layout)
    are cached, so building a vector costs one dict lookup and one scatter; a
    layout with names the index does not hold is cached while no column is added.

    Examples
    --------
    >>> index = FeatureIndex(max_features=2)
    >>> index.vector({"a": 2.0, "b": 3.0, "c": 4.0}, grow=True).tolist()
    [1.0, 2.0, 3.0]
    >>> index.dropped
    1
    """

    def __init__(self, max_features: int = 256):
        if max_features < 1:
            raise ValueError(f"max_features must be >= 1, got {max_features!r}")
        self.max_features = max_features
        self.columns: dict[str, int] = {}
        self.dropped = 0
        # per layout: its positions, or (positions, known mask, unknown count, columns then) where some are unknown
        self._layouts: dict[tuple[str, ...], np.ndarray | tuple[np.ndarray, np.ndarray, int, int]] = {}

    def __getstate__(self) -> dict:
        # the layouts are a cache of ``columns``: a model's state (a snapshot, a published version)
        # does not depend on which vectors happened to be built, a prediction's included
        state = dict(self.__dict__)
        state["_layouts"] = {}
        return state

    @property
    def size(self) -> int:
        """Vector length, intercept included."""
        return len(self.columns) + 1

    def _layout(self, names: tuple[str, ...], grow: bool) -> tuple[np.ndarray, np.ndarray | None]:
        """Column of each name (``-1`` where unknown) and, if any is unknown, a mask of the known."""
        found = self._layouts.get(names)
        columns = self.columns
        if found is not None:
            if type(found) is not tuple:
                return found, None
            positions, known, unknown, held = found
            if held == len(columns) and (not grow or held >= self.max_features):  # nothing added since, none can be
                if grow:
                    self.dropped += unknown
                return positions, known
        if grow:
            for name in names:
                if name not in columns:
                    if len(columns) >= self.max_features:
                        self.dropped += 1
                        continue
                    columns[name] = len(columns) + 1
        positions = np.fromiter((columns.get(n, -1) for n in names), dtype=np.intp, count=len(names))
        known = positions >= 0
        if len(self._layouts) >= MAX_LAYOUTS:
            self._layouts.clear()
        if known.all():
            self._layouts[names] = positions
            return positions, None
        self._layouts[names] = (positions, known, int(known.size - known.sum()), len(columns))
        return positions, known

    def take(self, names: tuple[str, ...], times: int = 1) -> None:
        """Give ``names`` their columns as ``times`` calls of :meth:`vector` with ``grow`` would (the names
        beyond the cap counted in ``dropped`` as often), without building the vectors."""
        _, known = self._layout(names, grow=True)
        if known is not None and times > 1:  # the names then unknown stay so: none can be added past the cap
            self.dropped += (times - 1) * int(known.size - known.sum())

    def cached_positions(self, names: tuple[str, ...]) -> np.ndarray | None:
        """The cached positions of ``names`` where every one of them has a column, else ``None``."""
        found = self._layouts.get(names)
        return None if found is None or type(found) is tuple else found

    def positions(self, names: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray | None]:
        """Column of each of ``names`` (``-1`` where unknown) and, if any is unknown, a mask of the known."""
        return self._layout(names, grow=False)

    def vector(self, features: Mapping[str, float], *, grow: bool) -> np.ndarray:
        """The vector of ``features`` (intercept first).

        With ``grow`` unseen names get new columns; without it they are
        ignored (an unseen feature has no learned weight).
        """
        values = np.fromiter(features.values(), dtype=float, count=len(features))
        return self.vector_of(tuple(features), values, grow=grow)

    def vector_of(self, names: tuple[str, ...], values: np.ndarray, *, grow: bool) -> np.ndarray:
        """:meth:`vector` of the features ``names`` (distinct) with ``values``, without a dict."""
        positions, known = self._layout(names, grow)
        x = np.zeros(self.size)
        x[0] = 1.0
        if known is None:
            x[positions] = values
        else:
            x[positions[known]] = values[known]
        return x

"""A growing, bounded map from feature names to vector columns."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np


class FeatureIndex:
    """Assigns each new feature name the next column, up to ``max_features``.

    Features beyond the cap are ignored (and counted in ``dropped``), so memory
    stays bounded however many distinct keys a stream carries. Column 0 is the
    intercept.

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

    @property
    def size(self) -> int:
        """Vector length, intercept included."""
        return len(self.columns) + 1

    def vector(self, features: Mapping[str, float], *, grow: bool) -> np.ndarray:
        """The vector of ``features`` (intercept first).

        With ``grow`` unseen names get new columns; without it they are
        ignored (an unseen feature has no learned weight).
        """
        if grow:
            for name in features:
                if name not in self.columns:
                    if len(self.columns) >= self.max_features:
                        self.dropped += 1
                        continue
                    self.columns[name] = len(self.columns) + 1
        x = np.zeros(self.size)
        x[0] = 1.0
        columns = self.columns
        for name, value in features.items():
            column = columns.get(name)
            if column is not None:
                x[column] = value
        return x

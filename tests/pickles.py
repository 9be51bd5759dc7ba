"""Pickles that compare values, not layouts."""

from __future__ import annotations

import io
import pickle


def unshared(value: object) -> bytes:
    """``value`` pickled with no memo: an object met twice is written twice (no cycles expected), so that
    equal values give equal bytes whichever objects they share (an object restored from a pickle holds
    its own copies of the strings and tuples it shared before)."""
    buffer = io.BytesIO()
    pickler = pickle.Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL)
    pickler.fast = True
    pickler.dump(value)
    return buffer.getvalue()

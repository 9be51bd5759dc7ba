"""Packed repeated numeric fields of a message, written from NumPy arrays in protobuf's wire format.

Protobuf's Python API fills a repeated field from Python numbers, one object per value. Here the
same fields are written as bytes (a tag, a length, then the values: little-endian doubles as they
lie in memory, unsigned integers as base-128 varints of one width) and given to protobuf's own
parser (``message.MergeFromString``), with no object per value; the message is protobuf's, and
serialises to the same bytes as one filled value by value (``tests/rpc/test_wire.py``).

The encoding is protobuf's documented wire format (https://protobuf.dev/programming-guides/encoding/):
a packed repeated field is one record of wire type 2 (length-delimited).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

_LENGTH_DELIMITED = 2
_LOW_SEVEN = np.uint64(0x7F)


def varint(value: int) -> bytes:
    """One non-negative integer (< 2**64) as a base-128 varint, least significant group first."""
    if value < 0 or value >= 1 << 64:
        raise ValueError(f"a varint holds 0 <= value < 2**64, got {value}")
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def varints(values: np.ndarray) -> bytes:
    """Non-negative integers (< 2**64) as consecutive varints, all as long as the largest's: a
    value with fewer 7-bit groups is padded with zero groups (continuation bit set), an over-long
    form protobuf's parsers accept and read as the value (``tests/rpc/test_wire.py``). What they parse
    into is serialised canonically again; these bytes are only ever given to ``MergeFromString``."""
    values = np.asarray(values)
    if values.dtype.kind not in "iu":
        raise TypeError(f"varints encodes integers, got an array of {values.dtype}")
    if values.size and values.dtype.kind == "i" and values.min() < 0:
        raise ValueError("varints encodes non-negative integers only")
    v = values.astype(np.uint64, copy=False).reshape(-1)
    if not v.size:
        return b""
    width = max(1, -(-int(v.max()).bit_length() // 7))  # the largest's 7-bit groups
    lanes = np.empty((v.size, width), dtype=np.uint8)
    for j in range(width):
        lanes[:, j] = (v >> np.uint64(7 * j)) & _LOW_SEVEN
    lanes[:, :-1] |= 0x80
    return lanes.tobytes()


def _field(number: int, body: bytes) -> bytes:
    return varint(number << 3 | _LENGTH_DELIMITED) + varint(len(body)) + body


def packed_doubles(number: int, values: np.ndarray) -> bytes:
    """Field ``number`` (``repeated double``) holding ``values``, in order."""
    return _field(number, np.ascontiguousarray(values, dtype="<f8").tobytes())


def packed_varints(number: int, values: np.ndarray) -> bytes:
    """Field ``number`` (``repeated uint32``/``uint64``, or a signed one of non-negative values) holding ``values``."""
    return _field(number, varints(values))


class Serialized:
    """A response message already written as its wire bytes, for the server to send as they are.

    A handler that writes its answer's bytes itself (:func:`predictor.rpc.columns.ranking_columns_to_pb`)
    returns one of these instead of a message, so the bytes are neither parsed into a message nor
    serialised again: the server's interceptor (:class:`~predictor.rpc.thin.ThinInterceptor`) sends
    :attr:`data` as it is (:func:`serializer`). Anything else that reads it sees the message
    (``message_type`` parsed from the bytes on first use): its fields, ``SerializeToString()``, ``==``.
    """

    __slots__ = ("data", "_type", "_message")

    def __init__(self, data: bytes, message_type: Any):
        self.data = data
        self._type = message_type
        self._message: Any = None

    def message(self) -> Any:
        """The message these bytes are (parsed once)."""
        if self._message is None:
            self._message = self._type.FromString(self.data)
        return self._message

    def SerializeToString(self, **options: Any) -> bytes:  # noqa: N802  (protobuf's name)
        """The message's bytes as protobuf writes them (the same message as :attr:`data`, whose fields
        may come in another order)."""
        return self.message().SerializeToString(**options)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.message(), name)

    def __eq__(self, other: object) -> bool:
        return self.message() == (other.message() if isinstance(other, Serialized) else other)

    __hash__ = None  # type: ignore[assignment]  (as a message's)


def serializer(serialize: Callable[..., bytes]) -> Callable[[Any], bytes]:
    """A method's response serialiser that also sends a :class:`Serialized` answer's bytes as they are.

    A message is written deterministically (``map`` entries sorted by key): protobuf otherwise writes a
    map in its hash table's order, which follows the process's hash seed, so that two processes (the
    answering workers of ``predictor serve --workers N``, or a restarted server) would send the same
    answer as different bytes.
    """

    def serialized(response: Any) -> bytes:
        return response.data if type(response) is Serialized else serialize(response, deterministic=True)

    return serialized

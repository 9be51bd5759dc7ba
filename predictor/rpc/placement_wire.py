"""The ``Placement`` messages of a column-wise ranking, written as wire bytes in one compiled pass.

A ``RankPlacementsResponse`` with one ``Placement`` per candidate (its ``Prediction`` and the
co-runners as predicted) costs a dozen Python field writes per candidate when filled message by
message. Here the fields every row of a calibration cell shares are serialised once per cell by
protobuf (the *templates*), and each row's placement (its device, rank, numbers, co-runners and
estimated paths, then its cell's template) is written by a compiled loop (numba) into one
buffer, which the server sends as it is (:class:`~predictor.rpc.wire.Serialized`): the message
it parses to is the one filled field by field (``tests/service/test_vectorised.py``).

The encoding is protobuf's documented wire format (https://protobuf.dev/programming-guides/encoding/):
field order within a message is free, a nested message's fields are its length-delimited bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from numba import njit

_ESTIMATED_HEAD = b"co_runners["
_ESTIMATED_TAIL = b"].overlap"
_PATH_FIXED = len(_ESTIMATED_HEAD) + len(_ESTIMATED_TAIL)


@njit(cache=True, nogil=True, inline="always")
def _vsize(value: int) -> int:
    size = 1
    v = np.uint64(value)
    while v >= np.uint64(0x80):
        v >>= np.uint64(7)
        size += 1
    return size


@njit(cache=True, nogil=True, inline="always")
def _put_varint(out: np.ndarray, p: int, value: int) -> int:
    v = np.uint64(value)
    while v >= np.uint64(0x80):
        out[p] = np.uint8((v & np.uint64(0x7F)) | np.uint64(0x80))
        v >>= np.uint64(7)
        p += 1
    out[p] = np.uint8(v)
    return p + 1


@njit(cache=True, nogil=True, inline="always")
def _put_double(out: np.ndarray, p: int, tag: int, value: float, scratch: np.ndarray, raw: np.ndarray) -> int:
    """``tag`` then ``value``'s 8 little-endian bytes, through ``scratch`` (one float64) and ``raw`` (its bytes)."""
    out[p] = tag
    scratch[0] = value
    for k in range(8):
        out[p + 1 + k] = raw[k]
    return p + 9


@njit(cache=True, nogil=True, inline="always")
def _copy(out: np.ndarray, p: int, buf: np.ndarray, start: int, stop: int) -> int:
    """``buf[start:stop]`` written at ``out[p:]`` byte by byte (the spans are short); the position after."""
    for k in range(stop - start):
        out[p + k] = buf[start + k]
    return p + stop - start


@njit(cache=True, nogil=True, inline="always")
def _put_bytes(out: np.ndarray, p: int, tag: int, buf: np.ndarray, start: int, stop: int) -> int:
    out[p] = tag
    p = _put_varint(out, p + 1, stop - start)
    return _copy(out, p, buf, start, stop)


@njit(cache=True, nogil=True, inline="always")
def _digits(value: int) -> int:
    size = 1
    while value >= 10:
        value //= 10
        size += 1
    return size


@njit(cache=True, nogil=True)
def _runner_size(j: int, model_off: np.ndarray, size: np.ndarray, key_off: np.ndarray,
                 attrs: np.ndarray) -> int:
    length = model_off[j + 1] - model_off[j]
    total = 9  # the overlap
    if length:
        total += 1 + _vsize(length) + length
    if size[j] != 0:
        total += 1 + _vsize(size[j])
    for c in range(attrs.shape[1]):
        if attrs[j, c] == attrs[j, c]:
            k = key_off[c + 1] - key_off[c]
            entry = 1 + _vsize(k) + k + 9
            total += 1 + _vsize(entry) + entry
    return total


@njit(cache=True, nogil=True)
def _sizes(order: np.ndarray, row_template: np.ndarray, template_off: np.ndarray, device_off: np.ndarray,
           slack: np.ndarray, solo_per_row: bool, offsets: np.ndarray, model_off: np.ndarray, size: np.ndarray,
           key_off: np.ndarray, attrs: np.ndarray, paths_off: np.ndarray, moving: np.ndarray, filled: np.ndarray,
           extra_off: np.ndarray, runner_size: np.ndarray, prediction_size: np.ndarray,
           placement_size: np.ndarray) -> int:
    """Each co-runner's, prediction's and placement's body length; the whole answer's length."""
    total = 0
    for j in range(runner_size.size):
        runner_size[j] = _runner_size(j, model_off, size, key_off, attrs)
    for rank in range(order.size):
        i = order[rank]
        t = row_template[i]
        pred = template_off[t + 1] - template_off[t] + 27 + (9 if solo_per_row else 0)
        for j in range(offsets[i], offsets[i + 1]):
            pred += 1 + _vsize(runner_size[j]) + runner_size[j]
        for j in range(paths_off[i], paths_off[i + 1]):
            if moving[j] or filled[j]:
                path = _PATH_FIXED + _digits(j - paths_off[i])
                pred += (2 + _vsize(path) + path) * (np.int64(moving[j]) + np.int64(filled[j]))
        pred += extra_off[i + 1] - extra_off[i]
        prediction_size[rank] = pred
        length = device_off[i + 1] - device_off[i]
        body = 1 + _vsize(rank + 1) + 18 + 1 + _vsize(pred) + pred + 1 + _vsize(i)
        if length:
            body += 1 + _vsize(length) + length
        if slack[i] >= 0:
            body += 2
        placement_size[rank] = body
        total += 1 + _vsize(body) + body
    return total


@njit(cache=True, nogil=True)
def _put_path(out: np.ndarray, p: int, local: int, head: np.ndarray, tail: np.ndarray) -> int:
    digits = _digits(local)
    out[p] = 0xF2  # Prediction.estimated = 30, length-delimited
    out[p + 1] = 0x01
    p = _put_varint(out, p + 2, head.size + digits + tail.size)
    p = _copy(out, p, head, 0, head.size)
    for d in range(digits - 1, -1, -1):
        out[p + d] = 48 + local % 10
        local //= 10
    p += digits
    return _copy(out, p, tail, 0, tail.size)


@njit(cache=True, nogil=True)
def _write(out: np.ndarray, order: np.ndarray, row_template: np.ndarray, templates: np.ndarray,
           template_off: np.ndarray, devices: np.ndarray, device_off: np.ndarray, slack: np.ndarray,
           probability: np.ndarray, latency: np.ndarray, solo: np.ndarray, solo_per_row: bool,
           upper: np.ndarray, offsets: np.ndarray, models: np.ndarray, model_off: np.ndarray,
           size: np.ndarray, keys: np.ndarray, key_off: np.ndarray, attrs: np.ndarray, overlaps: np.ndarray,
           paths_off: np.ndarray, moving: np.ndarray, filled: np.ndarray, extra: np.ndarray, extra_off: np.ndarray,
           runner_size: np.ndarray, prediction_size: np.ndarray, placement_size: np.ndarray,
           head: np.ndarray, tail: np.ndarray) -> int:
    scratch = np.empty(1, np.float64)
    raw = scratch.view(np.uint8)
    p = 0
    for rank in range(order.size):
        i = order[rank]
        out[p] = 0x0A  # RankPlacementsResponse.placements = 1
        p = _put_varint(out, p + 1, placement_size[rank])
        if device_off[i + 1] > device_off[i]:
            p = _put_bytes(out, p, 0x0A, devices, device_off[i], device_off[i + 1])
        out[p] = 0x10
        p = _put_varint(out, p + 1, rank + 1)
        if slack[i] >= 0:
            out[p] = 0x18
            out[p + 1] = 1
            p += 2
        p = _put_double(out, p, 0x21, slack[i], scratch, raw)
        p = _put_double(out, p, 0x29, probability[i], scratch, raw)
        out[p] = 0x38
        p = _put_varint(out, p + 1, i)
        out[p] = 0x32  # Placement.prediction = 6
        p = _put_varint(out, p + 1, prediction_size[rank])
        t = row_template[i]
        p = _copy(out, p, templates, template_off[t], template_off[t + 1])
        p = _put_double(out, p, 0x09, latency[i], scratch, raw)
        if solo_per_row:
            p = _put_double(out, p, 0x11, solo[i], scratch, raw)
        p = _put_double(out, p, 0x19, latency[i] / solo[i], scratch, raw)
        p = _put_double(out, p, 0x21, upper[i], scratch, raw)
        for j in range(offsets[i], offsets[i + 1]):
            out[p] = 0x52  # Prediction.co_runners = 10
            p = _put_varint(out, p + 1, runner_size[j])
            if model_off[j + 1] > model_off[j]:
                p = _put_bytes(out, p, 0x0A, models, model_off[j], model_off[j + 1])
            if size[j] != 0:
                out[p] = 0x10
                p = _put_varint(out, p + 1, size[j])
            for c in range(attrs.shape[1]):
                if attrs[j, c] == attrs[j, c]:
                    k = key_off[c + 1] - key_off[c]
                    out[p] = 0x1A
                    p = _put_varint(out, p + 1, 1 + _vsize(k) + k + 9)
                    p = _put_bytes(out, p, 0x0A, keys, key_off[c], key_off[c + 1])
                    p = _put_double(out, p, 0x11, attrs[j, c], scratch, raw)
            p = _put_double(out, p, 0x21, overlaps[j], scratch, raw)
        for j in range(paths_off[i], paths_off[i + 1]):
            if moving[j]:
                p = _put_path(out, p, j - paths_off[i], head, tail)
        for j in range(paths_off[i], paths_off[i + 1]):
            if filled[j]:
                p = _put_path(out, p, j - paths_off[i], head, tail)
        p = _copy(out, p, extra, extra_off[i], extra_off[i + 1])
    return p


def strings(values: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """``values`` as one UTF-8 buffer and ``len(values) + 1`` offsets."""
    joined = "".join(values)
    if joined.isascii():
        lengths = np.fromiter(map(len, values), dtype=np.int64, count=len(values))
        data = joined.encode("ascii")
    else:
        encoded = [v.encode() for v in values]
        lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(values))
        data = b"".join(encoded)
    offsets = np.zeros(len(values) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return np.frombuffer(data, dtype=np.uint8), offsets


def placements(order: np.ndarray, row_template: np.ndarray, templates: Sequence[bytes], devices: Sequence[str],
               slack: np.ndarray, probability: np.ndarray, latency: np.ndarray, solo: np.ndarray,
               solo_per_row: bool, upper: np.ndarray, offsets: np.ndarray, models: Sequence[str],
               batch_sizes: Sequence[int], keys: Sequence[str], attrs: np.ndarray, overlaps: np.ndarray,
               paths_off: np.ndarray, moving: np.ndarray, filled: np.ndarray, extra: Sequence[bytes]) -> bytes:
    """The ``placements`` field of a ``RankPlacementsResponse``, as wire bytes: row ``order[k]``
    ranked ``k + 1``. Per row: ``row_template`` (an index into ``templates``: a serialised
    ``Prediction`` holding the fields its cell shares), its device, slack, probability, latency,
    solo latency (in the template unless ``solo_per_row``), upper bound; its co-runners
    ``offsets[i]:offsets[i + 1]`` (model, batch size, the ``attrs`` matrix's row over ``keys``, NaN:
    absent, overlap); the estimated overlaps' paths of its candidate's ``moving``, then ``filled``,
    co-runners (``paths_off[i]:paths_off[i + 1]``, the candidate's own), then ``extra[i]`` (serialised ``estimated`` fields)."""
    text, (device_off, model_off, key_off) = _grouped(strings, devices, models, keys)
    blobs, (template_off, extra_off) = _grouped(_blobs, templates, extra)
    order = np.ascontiguousarray(order, dtype=np.int64)
    size = np.asarray(batch_sizes, dtype=np.int64)
    attrs = np.ascontiguousarray(attrs, dtype=np.float64).reshape(len(models), len(keys))
    moving, filled = np.asarray(moving, dtype=np.bool_), np.asarray(filled, dtype=np.bool_)
    runner_size = np.empty(len(models), np.int64)
    prediction_size, placement_size = np.empty(order.size, np.int64), np.empty(order.size, np.int64)
    offsets, paths_off = np.asarray(offsets, dtype=np.int64), np.asarray(paths_off, dtype=np.int64)
    total = _sizes(order, row_template, template_off, device_off, slack, solo_per_row, offsets, model_off, size,
                   key_off, attrs, paths_off, moving, filled, extra_off, runner_size, prediction_size, placement_size)
    out = np.empty(total, np.uint8)
    written = _write(out, order, row_template, blobs, template_off, text, device_off, slack,
                     probability, latency, solo, solo_per_row, upper, offsets, text, model_off, size, text,
                     key_off, attrs, overlaps, paths_off, moving, filled, blobs, extra_off, runner_size, prediction_size,
                     placement_size, _HEAD, _TAIL)
    assert written == total
    return out.tobytes()


_HEAD = np.frombuffer(_ESTIMATED_HEAD, dtype=np.uint8)
_TAIL = np.frombuffer(_ESTIMATED_TAIL, dtype=np.uint8)


def _grouped(join: Callable[[list], tuple[np.ndarray, np.ndarray]], *groups: Sequence) -> tuple[np.ndarray, list[np.ndarray]]:
    """``join`` (:func:`strings` or :func:`_blobs`) of every group's items at once: one buffer, and per group
    its ``len(group) + 1`` offsets into it."""
    buf, offsets = join([item for group in groups for item in group])
    out, at = [], 0
    for group in groups:
        out.append(offsets[at:at + len(group) + 1])
        at += len(group)
    return buf, out


def _blobs(blobs: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray]:
    offsets = np.zeros(len(blobs) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, blobs), dtype=np.int64, count=len(blobs)), out=offsets[1:])
    return np.frombuffer(b"".join(blobs), dtype=np.uint8), offsets


def warm() -> None:
    """Compile the writer now (or load it from the disk cache), on a one-row ranking."""
    one = np.ones(1)
    placements(np.zeros(1, np.int64), np.zeros(1, np.int64), [b""], ["d"], one, one, one, one, False, one,
               np.array([0, 1]), ["m"], [1], ["k"], np.ones((1, 1)), one, np.array([0, 1]), np.ones(1, bool),
               np.zeros(1, bool),
               [b""])

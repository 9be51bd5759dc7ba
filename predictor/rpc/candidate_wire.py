"""The repeated ``candidates`` of a ``RankPlacementsRequest``, read column-wise from its wire bytes.

A request written the obvious way (one ``PlacementCandidate`` message per candidate, each with
its ``CoRunner`` messages) costs a Python attribute read per field and a dict per map when it is
walked message by message. Here the request's serialised bytes (protobuf's canonical output of
the message the server already parsed) are read in one compiled pass (numba) into the columns the
packed form gives (:func:`read`): names as ASCII spans turned into lists of ``str`` at once, the
co-runners' attributes and the candidates' signals as key lists and matrices
(:class:`~predictor.records.keyed.KeyedMaps`, keys sorted as the classic form's dicts are). What
this reader does not take (a name that is not printable ASCII, a NaN in a map, which the matrix
would read as absent, a key given twice in one map, or a field of a wire type it does not skip) it declines with ``None``, and the
caller reads the messages one by one instead, so that every message is answered and every bad
value is reported as before.

The encoding is protobuf's documented wire format (https://protobuf.dev/programming-guides/encoding/).
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import numpy as np
from numba import njit

from predictor.records.keyed import KeyedMaps

_CANDIDATES = 2  # RankPlacementsRequest.candidates
_EMPTY = MappingProxyType({})


@njit(cache=True, nogil=True, inline="always")
def _varint(buf: np.ndarray, i: int) -> tuple[int, int]:
    value = np.int64(buf[i])
    if value < 0x80:  # one byte: most tags, lengths and small numbers
        return value, i + 1
    value &= 0x7F
    shift = 7
    i += 1
    while True:
        b = np.int64(buf[i])
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i
        shift += 7


@njit(cache=True, nogil=True, inline="always")
def _double(buf: np.ndarray, i: int, raw: np.ndarray, scratch: np.ndarray) -> float:
    """The little-endian double at ``buf[i:i + 8]``, through ``scratch`` (one float64) and ``raw`` (its 8 bytes)."""
    for k in range(8):
        raw[k] = buf[i + k]
    return scratch[0]


@njit(cache=True, nogil=True, inline="always")
def _skip(buf: np.ndarray, i: int, wire: int) -> int:
    """The position after a field of wire type ``wire`` whose value starts at ``i``; -1: not handled."""
    if wire == 0:
        return _varint(buf, i)[1]
    if wire == 1:
        return i + 8
    if wire == 2:
        length, i = _varint(buf, i)
        return i + length
    if wire == 5:
        return i + 4
    return -1


@njit(cache=True, nogil=True, inline="always")
def _printable(buf: np.ndarray, start: int, stop: int) -> bool:
    for k in range(start, stop):
        if buf[k] < 0x20 or buf[k] > 0x7E:
            return False
    return True


@njit(cache=True, nogil=True)
def _entry(buf: np.ndarray, i: int, stop: int, raw: np.ndarray, scratch: np.ndarray) -> tuple[int, int, float, bool]:
    """A ``map<string, double>`` entry in ``buf[i:stop]``: key start, key stop, value, whether read."""
    key_start, key_stop, value = i, i, 0.0
    while i < stop:
        tag, i = _varint(buf, i)
        field, wire = tag >> 3, tag & 7
        if field == 1 and wire == 2:
            length, i = _varint(buf, i)
            key_start, key_stop = i, i + length
            i += length
        elif field == 2 and wire == 1:
            value = _double(buf, i, raw, scratch)
            i += 8
        else:
            i = _skip(buf, i, wire)
            if i < 0:
                return 0, 0, 0.0, False
    ok = _printable(buf, key_start, key_stop) and value == value  # a NaN would read as absent
    return key_start, key_stop, value, ok


@njit(cache=True, nogil=True)
def _count(buf: np.ndarray) -> tuple[int, int, int]:
    """The candidates, co-runners and map entries of a serialised request (protobuf parsed it: it is
    well formed), walking only the fields that hold them; :func:`_scan` checks the rest."""
    n = r = m = 0
    i, end = 0, buf.size
    while i < end:
        tag, i = _varint(buf, i)
        if tag != (_CANDIDATES << 3 | 2):
            i = _skip(buf, i, tag & 7)
            if i < 0:
                return n, r, m
            continue
        length, i = _varint(buf, i)
        c_stop = i + length
        n += 1
        while i < c_stop:
            tag, i = _varint(buf, i)
            if tag == (3 << 3 | 2):
                length, i = _varint(buf, i)
                r_stop = i + length
                r += 1
                while i < r_stop:
                    tag, i = _varint(buf, i)
                    if tag == (3 << 3 | 2):
                        m += 1
                    i = _skip(buf, i, tag & 7)
                    if i < 0:
                        return n, r, m
            else:
                if tag == (5 << 3 | 2):
                    m += 1
                i = _skip(buf, i, tag & 7)
                if i < 0:
                    return n, r, m
    return n, r, m


@njit(cache=True, nogil=True)
def _scan(buf: np.ndarray, fill: bool, cand: np.ndarray, runner: np.ndarray, runner_f: np.ndarray,
          maps: np.ndarray, map_values: np.ndarray) -> tuple[int, int, int, bool]:
    """One pass over a serialised request: counts (candidates, co-runners, map entries) and, with
    ``fill``, the columns. ``cand`` rows: device span, kind span, source, co-runner count;
    ``runner`` rows: model span, batch size, has overlap, has remaining; ``runner_f`` rows:
    overlap, remaining; ``maps`` rows: owner (candidate for a signal, ``-1 - runner`` for an
    attribute), key span. The last item: whether every field was taken."""
    scratch = np.empty(1, np.float64)
    raw = scratch.view(np.uint8)
    n = r = m = 0
    i, end = 0, buf.size
    while i < end:
        tag, i = _varint(buf, i)
        if tag != (_CANDIDATES << 3 | 2):
            i = _skip(buf, i, tag & 7)
            if i < 0:
                return n, r, m, False
            continue
        length, i = _varint(buf, i)
        c_stop = i + length
        if fill and n >= cand.shape[0]:
            return n, r, m, False
        if fill:
            cand[n, 0] = cand[n, 1] = cand[n, 2] = cand[n, 3] = cand[n, 4] = cand[n, 5] = 0
        while i < c_stop:
            tag, i = _varint(buf, i)
            field, wire = tag >> 3, tag & 7
            if (field == 1 or field == 2) and wire == 2:
                length, i = _varint(buf, i)
                if not _printable(buf, i, i + length):
                    return n, r, m, False
                if fill:
                    cand[n, 2 * field - 2] = i
                    cand[n, 2 * field - 1] = i + length
                i += length
            elif field == 3 and wire == 2:
                length, i = _varint(buf, i)
                r_stop = i + length
                if fill and r >= runner.shape[0]:
                    return n, r, m, False
                if fill:
                    runner[r, 0] = runner[r, 1] = runner[r, 2] = runner[r, 3] = runner[r, 4] = 0
                    runner_f[r, 0] = runner_f[r, 1] = 0.0
                    cand[n, 5] += 1
                while i < r_stop:
                    tag, i = _varint(buf, i)
                    field, wire = tag >> 3, tag & 7
                    if field == 1 and wire == 2:
                        length, i = _varint(buf, i)
                        if not _printable(buf, i, i + length):
                            return n, r, m, False
                        if fill:
                            runner[r, 0], runner[r, 1] = i, i + length
                        i += length
                    elif field == 2 and wire == 0:
                        value, i = _varint(buf, i)
                        if fill:
                            runner[r, 2] = np.int64(np.int32(value & 0xFFFFFFFF))
                    elif field == 3 and wire == 2:
                        length, i = _varint(buf, i)
                        key_start, key_stop, value, ok = _entry(buf, i, i + length, raw, scratch)
                        if not ok:
                            return n, r, m, False
                        if fill and m >= maps.shape[0]:
                            return n, r, m, False
                        if fill:
                            maps[m, 0], maps[m, 1], maps[m, 2] = -1 - r, key_start, key_stop
                            map_values[m] = value
                        m += 1
                        i += length
                    elif (field == 4 or field == 5) and wire == 1:
                        if fill:
                            runner_f[r, field - 4] = _double(buf, i, raw, scratch)
                            runner[r, field - 1] = 1
                        i += 8
                    else:
                        i = _skip(buf, i, wire)
                        if i < 0:
                            return n, r, m, False
                r += 1
            elif field == 4 and wire == 0:
                value, i = _varint(buf, i)
                if fill:
                    cand[n, 4] = value
            elif field == 5 and wire == 2:
                length, i = _varint(buf, i)
                key_start, key_stop, value, ok = _entry(buf, i, i + length, raw, scratch)
                if not ok:
                    return n, r, m, False
                if fill and m >= maps.shape[0]:
                    return n, r, m, False
                if fill:
                    maps[m, 0], maps[m, 1], maps[m, 2] = n, key_start, key_stop
                    map_values[m] = value
                m += 1
                i += length
            else:
                i = _skip(buf, i, wire)
                if i < 0:
                    return n, r, m, False
        n += 1
    return n, r, m, True


@njit(cache=True, nogil=True)
def _intern(buf: np.ndarray, starts: np.ndarray, stops: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per span, the number of its distinct content (in order of first appearance), and the first
    span of each distinct content (an open-addressing table on FNV-1a hashes)."""
    size = 16
    while size < 2 * starts.size:
        size *= 2
    table = np.full(size, -1, np.int64)
    ids = np.empty(starts.size, np.int64)
    first = np.empty(starts.size, np.int64)
    distinct = 0
    for k in range(starts.size):
        h = np.uint64(14695981039346656037)
        for q in range(starts[k], stops[k]):
            h = (h ^ np.uint64(buf[q])) * np.uint64(1099511628211)
        slot = np.int64(h & np.uint64(size - 1))
        while True:
            j = table[slot]
            if j < 0:
                table[slot] = distinct
                first[distinct] = k
                ids[k] = distinct
                distinct += 1
                break
            other = first[j]
            length = stops[k] - starts[k]
            same = stops[other] - starts[other] == length
            for d in range(length if same else 0):
                if buf[starts[other] + d] != buf[starts[k] + d]:
                    same = False
                    break
            if same:
                ids[k] = j
                break
            slot = (slot + 1) & (size - 1)
    return ids, first[:distinct]


@njit(cache=True, nogil=True)
def _columns(buf: np.ndarray) -> tuple:
    """Counted by :func:`_count`, then filled by :func:`_scan`, and every name (devices, kinds, models,
    map keys, in that order) numbered by :func:`_intern`: whether every field was taken, the columns of :func:`_scan`,
    each name's number and the span of each distinct name; then the candidates' co-runner offsets and,
    per co-runner, whether its overlap and its remaining time are given and their values (0 where
    not). One compiled call per request."""
    n, r, m = _count(buf)
    cand, runner = np.zeros((n, 6), np.int64), np.zeros((r, 5), np.int64)
    runner_f, maps, map_values = np.zeros((r, 2)), np.zeros((m, 3), np.int64), np.zeros(m)
    found = _scan(buf, True, cand, runner, runner_f, maps, map_values)
    ok = found[3] and found[0] == n and found[1] == r and found[2] == m
    starts = np.concatenate((cand[:, 0], cand[:, 2], runner[:, 0], maps[:, 1]))
    stops = np.concatenate((cand[:, 1], cand[:, 3], runner[:, 1], maps[:, 2]))
    ids, first = _intern(buf, starts, stops)
    offsets = np.zeros(n + 1, np.int64)
    for i in range(n):
        offsets[i + 1] = offsets[i] + cand[i, 5]
    has_overlap, has_remaining = np.empty(r, np.bool_), np.empty(r, np.bool_)
    overlaps, remaining = np.zeros(r), np.zeros(r)
    for j in range(r):
        has_overlap[j], has_remaining[j] = runner[j, 3] != 0, runner[j, 4] != 0
        if has_overlap[j]:
            overlaps[j] = runner_f[j, 0]
        if has_remaining[j]:
            remaining[j] = runner_f[j, 1]
    return (ok, cand, runner, maps, map_values, ids, starts[first], stops[first], offsets, has_overlap,
            has_remaining, overlaps, remaining)


def _keyed(rows: int, owners: np.ndarray, names: list[str], ids: np.ndarray,
           values: np.ndarray) -> KeyedMaps | list | None:
    """The maps of ``rows`` owners from their entries (owner, key's number among ``names``, value), as a
    keyed matrix whose keys are sorted; ``None`` where an owner gives a key twice."""
    if not owners.size:
        return [_EMPTY] * rows
    present = np.flatnonzero(np.bincount(ids, minlength=len(names))).tolist()  # the numbers used, ascending
    keys = sorted(map(names.__getitem__, present))
    column = np.empty(len(names), np.int64)
    column[present] = [keys.index(names[j]) for j in present]
    matrix = np.full((rows, len(keys)), np.nan)
    matrix[owners, column[ids]] = values
    if np.count_nonzero(~np.isnan(matrix)) != values.size:
        return None  # a key given twice in one map (protobuf keeps the last; declined here)
    return KeyedMaps(tuple(keys), matrix)


def read(raw: bytes) -> dict[str, Any] | None:
    """The candidates of the serialised ``RankPlacementsRequest`` ``raw`` as the keyword arguments of
    :class:`~predictor.service.estimates.placements.CandidateColumns` (sources as protobuf codes,
    under ``source_codes``); ``None`` where a field is not one this reader takes (see the module)."""
    (ok, cand, runner, maps, map_values, ids, starts, stops, offsets, has_overlap, has_remaining, overlaps,
     remaining) = _columns(np.frombuffer(raw, dtype=np.uint8))
    if not ok:
        return None
    n, r = cand.shape[0], runner.shape[0]
    text = raw.decode("latin-1")  # every name taken is printable ASCII: its span's characters are its bytes
    names = [text[a:b] for a, b in zip(starts.tolist(), stops.tolist(), strict=True)]
    name_of = np.empty(len(names), dtype=object)  # a number's name, gathered by NumPy
    name_of[:] = names
    key_ids = ids[2 * n + r:]
    signal, attr = maps[:, 0] >= 0, maps[:, 0] < 0
    signals = _keyed(n, maps[signal, 0], names, key_ids[signal], map_values[signal])
    attrs = _keyed(r, -1 - maps[attr, 0], names, key_ids[attr], map_values[attr])
    if signals is None or attrs is None:
        return None
    return {
        "devices": name_of[ids[:n]].tolist(),
        "device_kinds": name_of[ids[n:2 * n]].tolist(),
        "source_codes": cand[:, 4],
        "signals": signals,
        "offsets": offsets,
        "models": name_of[ids[2 * n:2 * n + r]].tolist(),
        "batch_sizes": runner[:, 2].tolist(),
        "attrs": attrs,
        "overlaps": overlaps,
        "remaining": remaining,
        "has_overlap": has_overlap,
        "has_remaining": has_remaining,
    }


def warm() -> None:
    """Compile the reader now (or load it from the disk cache), on a request of one candidate."""
    read(bytes([0x12, 0x0B, 0x0A, 0x01, 0x61, 0x1A, 0x06, 0x0A, 0x01, 0x62, 0x10, 0x02, 0x20, 0x01]))

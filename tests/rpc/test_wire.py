"""Packed numeric fields written as wire-format bytes parse to the message protobuf fills value by value."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from predictor.rpc import wire
from predictor.rpc.protos import pb2

FIELDS = {field.name: field.number for field in pb2().PackedRanking.DESCRIPTOR.fields}


def _numbers_message() -> type:
    """A proto3 message with one ``repeated uint64 values = 1`` (packed), made at run time."""
    file = descriptor_pb2.FileDescriptorProto(name="wire_test.proto", package="wiretest", syntax="proto3")
    file.message_type.add(name="Numbers").field.add(
        name="values", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_UINT64,
        label=descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("wiretest.Numbers"))


NUMBERS = _numbers_message()
doubles = hnp.arrays(np.float64, st.integers(0, 40), elements=st.floats(allow_nan=False, width=64))


@given(st.lists(st.integers(0, 2**64 - 1), max_size=40))
def test_varints_are_protobufs_own(values):
    want = pb2().PackedRanking(candidate_index=[v % 2**32 for v in values], observations_learned=values[0] if values else 0)
    got = pb2().PackedRanking()
    got.MergeFromString(wire.packed_varints(FIELDS["candidate_index"], np.array([v % 2**32 for v in values],
                                                                                 dtype=np.uint64)))
    got.observations_learned = values[0] if values else 0
    assert got == want
    assert got.SerializeToString() == want.SerializeToString()
    for v in values:  # alone, a value's varint is the canonical one (up to ten bytes)
        assert wire.varints(np.array([v], dtype=np.uint64)) == wire.varint(v)


@given(doubles, doubles)
def test_doubles_are_protobufs_own(latency, slack):
    want = pb2().PackedRanking(latency_ms=latency.tolist(), slack_ms=slack.tolist(), predictor="rls")
    got = pb2().PackedRanking(predictor="rls")
    got.MergeFromString(wire.packed_doubles(FIELDS["latency_ms"], latency)
                        + wire.packed_doubles(FIELDS["slack_ms"], slack))
    assert got.SerializeToString() == want.SerializeToString()
    assert np.array_equal(np.array(got.latency_ms), latency)
    assert np.signbit(np.array(got.slack_ms)).tolist() == np.signbit(slack).tolist()  # -0.0 kept


@given(st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=40))
def test_values_of_every_size_parse_back(values):
    got = NUMBERS()
    got.MergeFromString(wire.packed_varints(1, np.array(values, dtype=np.uint64)))
    assert list(got.values) == values
    assert got.SerializeToString() == NUMBERS(values=values).SerializeToString()


def test_strided_and_big_endian_arrays_are_written_as_their_values():
    values = np.arange(10, dtype=">f8")[::3]
    got = pb2().PackedRanking()
    got.MergeFromString(wire.packed_doubles(FIELDS["probability"], values))
    assert list(got.probability) == [0.0, 3.0, 6.0, 9.0]


@pytest.mark.parametrize("bad", [-1, 2**64])
def test_out_of_range_integers_are_refused(bad):
    with pytest.raises(ValueError):
        wire.varint(bad)
    if bad < 0:
        with pytest.raises(ValueError, match="non-negative"):
            wire.varints(np.array([3, bad]))


def test_an_array_of_floats_is_refused_not_truncated():
    with pytest.raises(TypeError, match="integers"):
        wire.varints(np.array([1.5, 2.0]))


def test_a_serialized_answer_is_sent_as_written_and_read_as_its_message():
    messages = pb2()
    response = messages.RankPlacementsResponse(deadline_ms=5.0)
    response.placements.add(device="gpu1", rank=1, slack_ms=2.5)
    written = response.placements[0].SerializeToString()
    # the placements (field 1) written by hand, the other fields after them
    data = wire._field(1, written) + messages.RankPlacementsResponse(deadline_ms=5.0).SerializeToString()
    answer = wire.Serialized(data, messages.RankPlacementsResponse)
    send = wire.serializer(messages.RankPlacementsResponse.SerializeToString)
    assert send(answer) is data  # sent as it is, not parsed nor serialised again
    assert send(response) == response.SerializeToString()  # any other answer as protobuf writes it
    assert answer == response and answer.placements[0].device == "gpu1" and answer.deadline_ms == 5.0
    assert answer.SerializeToString(deterministic=True) == response.SerializeToString(deterministic=True)


_WRITE_ANSWER = """
import sys
from predictor.rpc import wire
from predictor.rpc.protos import pb2
m = pb2()
answer = m.PredictLatencyResponse(prediction=m.Prediction(latency_ms=3.0, co_runners=[
    m.CoRunner(model="bert", attrs={f"attr{i}": float(i) for i in range(16)})]))
sys.stdout.write(wire.serializer(type(answer).SerializeToString)(answer).hex())
"""


def test_an_answer_with_maps_is_the_same_bytes_in_every_process():
    """A co-runner's attributes (a ``map``) are written in key order, not in the order of a hash table
    seeded per process: the same answer from two processes is the same bytes."""
    written = set()
    for seed in ("0", "1", "2", "3"):
        done = subprocess.run([sys.executable, "-c", _WRITE_ANSWER], capture_output=True, text=True, check=True,
                              env={**os.environ, "PYTHONHASHSEED": seed})
        written.add(done.stdout)
    assert len(written) == 1
    answer = pb2().PredictLatencyResponse.FromString(bytes.fromhex(written.pop()))
    assert dict(answer.prediction.co_runners[0].attrs) == {f"attr{i}": float(i) for i in range(16)}

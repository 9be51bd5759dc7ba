"""One truth, black-box over gRPC: the same records, the same answers, whatever the message sizes
and whichever process learned them (``docs/design.md``, One truth).

Real ``predictor serve`` processes on port 0, each with its own ``PYTHONHASHSEED`` (the order in
which a process iterates a protobuf map or a set of strings must not reach the sums), fed
:func:`one_truth_data.records` as ``ReportObservations`` messages of 1, 7, 50 and 500 records.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from one_truth_data import answers_of, max_relative, records
from serve_process import ServeProcess, start_server

from predictor.rpc import convert
from predictor.rpc.client import InterferenceClient
from predictor.rpc.protos import load

pb2, _ = load()
RECORDS = records(600)


def serve(folder: Path, name: str, hash_seed: int, *args: str) -> ServeProcess:
    """``predictor serve`` with ``PYTHONHASHSEED=hash_seed`` (the child inherits the environment)."""
    before = os.environ.get("PYTHONHASHSEED")
    os.environ["PYTHONHASHSEED"] = str(hash_seed)
    try:
        return start_server(folder, "--snapshot-every", "0", *args, name=name)
    finally:
        if before is None:
            del os.environ["PYTHONHASHSEED"]
        else:
            os.environ["PYTHONHASHSEED"] = before


def feed(client: InterferenceClient, size: int, items=RECORDS) -> None:
    """Stream ``items`` as messages of ``size`` records (the ``records`` field), one stream."""
    messages = (pb2.ReportObservationsRequest(records=[convert.record_to_pb(r) for r in items[at:at + size]])
                for at in range(0, len(items), size))
    report = convert.observation_report_from_pb(client.stub.ReportObservations(messages, timeout=120))
    assert report.accepted + report.outliers == len(items) and report.outliers >= 3


def answers(client: InterferenceClient) -> list[float]:
    return answers_of(client.predict, lambda q, d, c: client.check_deadline(q, d.ms, confidence=c))


def run(server: ServeProcess, size: int) -> list[float]:
    with InterferenceClient(server.target) as client:
        client.wait_ready(60)
        feed(client, size)
        return answers(client)


def run_all(folder: Path, cases: list[tuple]) -> list[list[float]]:
    """Start a server per case ``(message size, name, hash seed, *serve arguments)`` at once, feed
    each the records in messages of its size, and return each one's answers."""
    with ThreadPoolExecutor(len(cases)) as pool:
        servers = list(pool.map(lambda case: serve(folder, case[1], case[2], *case[3:]), cases))
        try:
            return list(pool.map(run, servers, [case[0] for case in cases]))
        finally:
            for server in servers:
                server.stop()


@pytest.mark.slow
def test_message_sizes_and_processes_answer_the_same(tmp_path):
    """Sizes 1, 7, 50 and 500 into four servers (four hash seeds), and 50 again into a fifth."""
    cases = [(1, 11), (7, 22), (50, 33), (500, 44), (50, 55)]
    got = run_all(tmp_path, [(size, f"s{size}-{seed}", seed) for size, seed in cases])
    worst = max(max_relative(got[0], other) for other in got[1:])
    print(f"max relative difference across message sizes and hash seeds: {worst:.3g}")
    assert worst <= 1e-12


def test_two_hash_seeds_answer_the_same(tmp_path):
    """Two fresh servers fed the same messages: the same answers (the maps of a message come in an
    order that depends on the process; they are sorted where they are read)."""
    a, b = run_all(tmp_path, [(50, f"seed{seed}", seed) for seed in (1, 2)])
    assert max_relative(a, b) <= 1e-12


@pytest.mark.slow
def test_a_worker_answers_what_the_one_process_server_answers(tmp_path):
    """``--workers 2``: the answers come from a worker process reading the learner's published
    versions; they equal those of a one-process server fed the same messages."""
    one, workers = run_all(tmp_path, [(50, "one", 3), (50, "workers", 4, "--workers", "2")])
    assert max_relative(one, workers) <= 1e-12

"""Metrics once: with ``--workers`` and ``--shard`` every call and record is counted once, and every
family a one-process server exports is on the supervisor's endpoint.

A worker forwards writes (and GetStatus) to the learners over their sockets; only the worker, where
the call arrived, counts it. The learners copy their service's counters (observations learned,
rejected, refused, duplicates, drift alarms, transfers) and the workers their PlanPipeline counts;
the endpoint sums them over processes (:class:`~predictor.rpc.metrics.MultiProcessMetrics`).
"""

from __future__ import annotations

import dataclasses
import re
import socket
import time
import urllib.request

from prometheus_client.parser import text_string_to_metric_families
from serve_process import ServeProcess, start_server

from predictor.records.record import BatchSpec
from predictor.rpc.client import InterferenceClient
from predictor.service import CoRunnerSource, Query
from predictor.service.synthetic import synthetic_records

A = synthetic_records(60, seed=3, device_kind="KindA")
B = synthetic_records(40, seed=4, device_kind="KindB")
RECORDS = [r for pair in zip(A, B, strict=False) for r in pair] + A[len(B):]
OUTLIERS = (97, 99)  # past the gate's warm-up (50 records of the kind)
FED = [dataclasses.replace(r, latency_ms=r.latency_ms * 80) if i in OUTLIERS else r for i, r in enumerate(RECORDS)]
QUERY = Query("sim0", BatchSpec("bert", 4, {"l2_util": 0.5}), device_kind="KindA",
              co_runner_source=CoRunnerSource.EXPLICIT)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _scrape(port: int) -> dict[str, dict[tuple, float]]:
    """``{sample name: {sorted labels: value}}`` of the endpoint."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def _value(samples: dict[str, dict[tuple, float]], name: str, **labels: str) -> float:
    """The sum of ``name``'s samples that carry ``labels`` (over the other labels: shards, workers)."""
    return sum(v for key, v in samples.get(name, {}).items() if set(labels.items()) <= set(key))


def _calls(server: ServeProcess) -> dict[str, int]:
    """Make a known number of calls, each on a connection of its own (spread over the workers)."""
    import grpc

    def client() -> InterferenceClient:
        return InterferenceClient(channel=grpc.insecure_channel(
            server.target, options=[("grpc.use_local_subchannel_pool", 1)]))

    with InterferenceClient(server.target) as first:
        first.wait_ready(240)
        report = first.report_observations(FED[:50], timeout=60, producer_id="p", first_sequence=1)
        assert report.accepted == 50
    calls = {"ReportObservations": 1, "GetStatus": 0, "PredictLatency": 0}
    for i in range(6):
        c = client()
        try:
            if i == 0:
                rest = c.report_observations(FED[50:], timeout=60, producer_id="p", first_sequence=51)
                assert (rest.accepted, rest.outliers) == (len(FED) - 50 - 2, 2)
                again = c.report_observations(FED[:10], timeout=60, producer_id="p", first_sequence=1)
                assert again.duplicates == 10
                calls["ReportObservations"] += 2
            c.status()
            c.predict(QUERY)
            c.predict(QUERY, 0.9)
            calls["GetStatus"] += 1
            calls["PredictLatency"] += 2
        finally:
            c.close()
    return calls


def _metrics_port(server: ServeProcess) -> int:
    return int(re.search(r"metrics[^\n]* on http://127.0.0.1:(\d+)/metrics", server.wait_for("/metrics")).group(1))


def _counted(samples, calls: dict[str, int]) -> None:
    for method, n in calls.items():
        assert _value(samples, "interference_rpc_requests_total", method=method) == n, method
    assert _value(samples, "interference_observations_learned_total") == len(FED) - len(OUTLIERS)
    assert _value(samples, "interference_observations_refused_total", reason="outlier") == len(OUTLIERS)
    assert _value(samples, "interference_observations_rejected_total") == len(OUTLIERS)  # refused count as rejected
    assert _value(samples, "interference_observations_duplicates_total") == 10


def test_each_call_and_record_counted_once_with_workers_and_shards_as_in_one_process(tmp_path):
    single = start_server(tmp_path, "--metrics-port", str(_free_port()), "--snapshot-every", "0", name="single")
    multi = start_server(tmp_path, "--workers", "2", "--shard", "KindA", "--shard", "KindB", "--snapshot-every", "0",
                         "--metrics-port", str(_free_port()), name="multi", timeout=240)
    try:
        one = _calls(single)
        many = _calls(multi)
        assert one == many
        single_port, multi_port = _metrics_port(single), _metrics_port(multi)
        _counted(_scrape(single_port), one)
        deadline = time.monotonic() + 30  # the learners copy their counters every 0.5 s
        while True:
            samples = _scrape(multi_port)
            try:
                _counted(samples, many)
                break
            except AssertionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        # every family of a one-process server is there (the model gauges with a shard label besides)
        missing = {name for name in _scrape(single_port) if not name.endswith("_created")} - set(samples)
        assert not missing, missing
    finally:
        single.stop()
        multi.stop()

"""``predictor serve --workers N``: real processes, real gRPC on a free port.

* N answering workers answer exactly as one process does for the same model version;
* observations sent to any worker are learned by the learner, and are in every worker's answers
  once acknowledged;
* the supervisor says SERVING once, when every worker has started up;
* killing the workers, or the learner, loses no acknowledged observation (the supervisor starts
  them again);
* one channel on the balanced target (``--targets-file``: every worker's own port) holds a connection to
  every worker, before and after a worker is started again, and its calls are answered as one
  process answers them;
* observations are routed to the learner of their device kind's shard;
* the Prometheus endpoint sums a counter over the worker processes (multiprocess mode), and shows
  each learner's model-state gauges (log positions, MAPE, coverage) labelled by shard.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import time
import urllib.request
from pathlib import Path

import grpc
import pytest
from serve_process import ServeProcess, start_server

from predictor.records.logio import write_records
from predictor.records.record import BatchSpec
from predictor.rpc.client import InterferenceClient
from predictor.service import Candidate, CoRunnerSource, PlannedCoRunner, Query
from predictor.service.errors import Unavailable
from predictor.service.synthetic import synthetic_records

CONNECTIONS = 8  # separate channels: SO_REUSEPORT spreads connections over the workers
QUERIES = [
    Query("sim0", BatchSpec("bert", 4, {"l2_util": 0.5, "dram_util": 0.4}), co_runner_source=CoRunnerSource.EXPLICIT),
    Query(
        "sim1",
        BatchSpec("mlp", 2, {"l2_util": 0.1, "dram_util": 0.6}),
        co_runners=(PlannedCoRunner("resnet", 8, {"l2_util": 0.3, "dram_util": 0.2}, overlap=0.7),),
        co_runner_source=CoRunnerSource.EXPLICIT,
    ),
]
CANDIDATES = [Candidate("sim0", "SimGPU"), Candidate("sim1", "SimGPU", co_runner_source=CoRunnerSource.EXPLICIT)]


def answers(client: InterferenceClient) -> list:
    """PredictLatency, CheckDeadline and RankPlacements answers of ``client``'s server."""
    out: list = []
    for query in QUERIES:
        for confidence in (0.5, 0.99):
            p = client.predict(query, confidence)
            out.append((p.latency_ms, p.upper_bound_ms, p.observations_learned, p.residuals))
        d = client.check_deadline(query, 40.0, confidence=0.9)
        out.append((d.feasible, d.slack_ms, d.probability))
    ranking = client.rank_placements(BatchSpec("bert", 4, {"l2_util": 0.5}), CANDIDATES, 40.0)
    out.append([(r.device, r.prediction.latency_ms, r.prediction.upper_bound_ms) for r in ranking.placements])
    return out


def connection(target: str) -> InterferenceClient:
    """A client on a TCP connection of its own (gRPC otherwise shares one among channels to a target)."""
    return InterferenceClient(channel=grpc.insecure_channel(target, options=[("grpc.use_local_subchannel_pool", 1)]))


def answers_of_every_connection(target: str) -> list[list]:
    clients = [connection(target) for _ in range(CONNECTIONS)]
    try:
        return [answers(c) for c in clients]
    finally:
        for c in clients:
            c.channel.close()


def pids(server: ServeProcess, role: str) -> dict[int, int]:
    """``{index: pid}`` of the workers or learners, from the server's log (the latest of each index)."""
    return {int(i): int(p) for i, p in re.findall(rf"{role} (\d+) \(pid (\d+)\)", server.output())}


def wait_for(condition, timeout: float = 90.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.1)


@pytest.fixture(scope="module")
def warm_log(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("warm") / "warm.jsonl.gz"
    write_records(path, synthetic_records(200, seed=5))
    return path


def test_workers_answer_as_one_process_and_learn_what_any_worker_acknowledged(tmp_path, warm_log):
    multi = start_server(tmp_path / "multi", "--workers", "2", "--warm-start", str(warm_log), "--state",
                         str(tmp_path / "multi" / "state"), "--fsync", "always", name="multi", timeout=240)
    single = start_server(tmp_path / "single", "--warm-start", str(warm_log), "--state",
                          str(tmp_path / "single" / "state"), "--fsync", "always", name="single")
    try:
        m, s = InterferenceClient(multi.target), InterferenceClient(single.target)
        m.wait_ready(120)
        s.wait_ready(120)
        # one SERVING line, once every worker has started up (a learner's line does not say SERVING)
        started = multi.wait_for("; SERVING", timeout=60)
        serving_at = started.index("2 workers answering on 127.0.0.1")
        assert started.count("SERVING") - started.count("NOT_SERVING") == 1
        assert all(started.index(f"worker {i} (pid") < serving_at for i in range(2))
        reference = answers(s)
        assert reference[0][2] == 200
        assert answers_of_every_connection(multi.target) == [reference] * CONNECTIONS

        # observations through any worker: in every worker's answers as soon as acknowledged
        more = synthetic_records(60, seed=6)
        for start in range(0, 60, 20):
            via = connection(multi.target)
            report = via.report_observations(more[start : start + 20], timeout=30)
            via.channel.close()
            assert report.accepted == 20 and report.log_sequence >= start + 20
            s.report_observations(more[start : start + 20], timeout=30)
            reference = answers(s)
            assert reference[0][2] == 200 + start + 20
            assert answers_of_every_connection(multi.target) == [reference] * CONNECTIONS
        assert m.status().observations_learned == 260

        # the workers die (SIGKILL) after the acknowledgements: nothing acknowledged is lost
        before = pids(multi, "worker")
        assert len(before) == 2
        for pid in before.values():
            os.kill(pid, signal.SIGKILL)
        wait_for(lambda: set(pids(multi, "worker").values()).isdisjoint(before.values())
                 and len(pids(multi, "worker")) == 2, what="workers started again")
        m.wait_ready(60)
        assert answers_of_every_connection(multi.target) == [reference] * CONNECTIONS

        # the learner dies (SIGKILL): started again on its state folder, it holds every acknowledged record
        learner = pids(multi, "learner")[0]
        os.kill(learner, signal.SIGKILL)
        wait_for(lambda: pids(multi, "learner")[0] != learner, what="learner started again")
        last = synthetic_records(70, seed=9)[60:]
        report = None
        while report is None:  # the writes forwarded meanwhile fail UNAVAILABLE (the producer resends)
            try:
                report = m.report_observations(last, timeout=30, producer_id="late", first_sequence=1)
            except Unavailable:
                time.sleep(0.2)
        assert report.accepted == 10 and m.status().observations_learned == 270
        s.report_observations(last, timeout=30)
        reference = answers(s)
        assert answers_of_every_connection(multi.target) == [reference] * CONNECTIONS
    finally:
        assert multi.stop(timeout=60) == 0
        single.stop()
    # the learner's state folder is a single process's: restarted with one process, it holds them all
    again = start_server(tmp_path / "multi", "--state", str(tmp_path / "multi" / "state"), name="again")
    try:
        client = InterferenceClient(again.target)
        client.wait_ready(120)
        assert client.status().observations_learned == 270
        assert answers(client) == reference
    finally:
        again.stop()


def established_local_ports(pid: int) -> set[int]:
    """The local ports of ``pid``'s established TCP connections (``/proc``: its socket inodes in ``net/tcp``)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            link = os.readlink(fd)
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    ports = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "01" and fields[9] in inodes:  # 01: ESTABLISHED
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def test_one_channel_on_the_balanced_target_reaches_every_worker(tmp_path, warm_log):
    targets = tmp_path / "targets"
    multi = start_server(tmp_path / "multi", "--workers", "2", "--warm-start", str(warm_log),
                         "--targets-file", str(targets), name="multi", timeout=240)
    single = start_server(tmp_path / "single", "--warm-start", str(warm_log), name="single")
    try:
        target = targets.read_text().strip()
        own = [int(address.rsplit(":", 1)[1]) for address in target.removeprefix("ipv4:").split(",")]
        assert target.startswith("ipv4:127.0.0.1:") and len(set(own)) == 2 and multi.port not in own
        with InterferenceClient(target) as balanced, InterferenceClient(single.target) as reference:
            balanced.wait_ready(120)
            reference.wait_ready(120)
            multi.wait_for("; SERVING", timeout=60)
            assert [answers(balanced) for _ in range(3)] == [answers(reference)] * 3
            workers = pids(multi, "worker")
            assert {i: established_local_ports(pid) & set(own) for i, pid in workers.items()} == {
                0: {own[0]}, 1: {own[1]}}  # one connection of the one channel on each worker's own port

            os.kill(workers[0], signal.SIGKILL)  # started again on the same own port: the channel reconnects
            wait_for(lambda: pids(multi, "worker")[0] != workers[0], what="worker 0 started again")

            def reconnected() -> bool:
                assert answers(balanced) == answers(reference)  # answered meanwhile, by the other worker
                return own[0] in established_local_ports(pids(multi, "worker")[0])

            wait_for(reconnected, what="the channel connected to the worker started again")
    finally:
        assert multi.stop(timeout=60) == 0
        single.stop()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _metric(text: str, name: str, **labels: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_shards_learn_their_device_kinds_and_metrics_sum_over_workers(tmp_path):
    state = tmp_path / "state"
    warm = tmp_path / "warm.jsonl.gz"  # split by shard: each learner warm-starts on its kinds only
    write_records(warm, synthetic_records(10, seed=1, device_kind="KindA") + synthetic_records(10, seed=2,
                                                                                              device_kind="KindB"))
    server = start_server(tmp_path, "--workers", "2", "--shard", "KindA", "--shard", "KindB", "--state", str(state),
                          "--warm-start", str(warm), "--metrics-port", str(free_port()), name="sharded", timeout=240)
    a = synthetic_records(40, seed=7, device_kind="KindA")
    b = synthetic_records(30, seed=8, device_kind="KindB")
    mixed = [r for pair in zip(a, b, strict=False) for r in pair] + a[len(b):]
    try:
        client = InterferenceClient(server.target)
        client.wait_ready(120)
        port = re.search(r"metrics of all processes on http://127.0.0.1:(\d+)/metrics", server.output()).group(1)

        def scrape() -> str:
            return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()

        def appended(shard: int) -> float:
            return _metric(scrape(), "interference_observation_log_sequence", position="appended", shard=str(shard))

        wait_for(lambda: all(f'interference_observation_log_sequence{{position="appended",shard="{i}"}}' in scrape()
                             for i in (0, 1)), 30, "each learner's log position on the endpoint")
        before = appended(0), appended(1)
        report = client.report_observations(mixed, timeout=60, producer_id="p", first_sequence=1)
        assert (report.accepted, report.rejected) == (70, 0)
        again = client.report_observations(mixed, timeout=60, producer_id="p", first_sequence=1)
        assert (again.accepted, again.duplicates) == (0, 70)  # exactly once across the split
        kinds = {k.device_kind: k.observations for k in client.status().device_kinds}
        assert kinds == {"KindA": 50, "KindB": 40}
        query = Query("sim0", BatchSpec("bert", 4, {"l2_util": 0.5}), device_kind="KindB",
                      co_runner_source=CoRunnerSource.EXPLICIT)
        assert client.predict(query).observations_learned == 40  # answered from shard 1's version

        # Prometheus: PredictLatency counted in every worker process, summed on the endpoint
        for _ in range(3):
            for c in [connection(server.target) for _ in range(CONNECTIONS)]:
                c.predict(query)
                c.channel.close()
        folder = Path(re.search(r"run folder (\S+)\)", server.output()).group(1)) / "metrics"
        counter_pids = {p.name.split("_")[1].split(".")[0] for p in folder.glob("counter_*.db")}
        assert {str(p) for p in pids(server, "worker").values()} <= counter_pids  # two workers counted
        text = scrape()
        assert _metric(text, "interference_rpc_requests_total", method="PredictLatency", code="OK") == 1 + 3 * CONNECTIONS

        # the learners' model-state gauges, labelled by shard: log positions moved by what each learned
        wait_for(lambda: (appended(0), appended(1)) == (before[0] + 40, before[1] + 30), 30, "log positions")
        text = scrape()
        for shard, kind in ((0, "KindA"), (1, "KindB")):
            mape = _metric(text, "interference_rolling_mape_percent", device_kind=kind, shard=str(shard))
            coverage = _metric(text, "interference_bound_coverage_ratio", device_kind=kind, shard=str(shard))
            assert mape > 0 and 0 < coverage <= 1, (kind, mape, coverage)
            assert f'device_kind="{kind}",shard="{1 - shard}"' not in text  # a kind only on its shard's learner
    finally:
        assert server.stop(timeout=60) == 0
    # each shard's state folder holds its kinds only
    for shard, kind, n in ((0, "KindA", 50), (1, "KindB", 40)):
        one = start_server(tmp_path, "--state", str(state / f"shard-{shard}"), name=f"shard{shard}")
        try:
            c = InterferenceClient(one.target)
            c.wait_ready(120)
            assert {k.device_kind: k.observations for k in c.status().device_kinds} == {kind: n}
        finally:
            one.stop()


def test_answers_given_by_workers_are_linked_to_their_observations_by_the_learner(tmp_path, warm_log):
    cpus = sorted(os.sched_getaffinity(0))
    learner_cpus, worker_cpus = ({cpus[-1]}, set(cpus[:-1])) if len(cpus) > 1 else (set(cpus), set(cpus))
    # an rls learner: its answering workers load neither scikit-learn nor river (an sgd expert needs river)
    server = start_server(tmp_path, "--workers", "2", "--predictor", "rls", "--warm-start", str(warm_log),
                          "--learner-nice", "3",
                          "--learner-policy", "batch", "--learner-cpus", ",".join(map(str, learner_cpus)),
                          "--worker-cpus", ",".join(map(str, worker_cpus)), "--pin-workers", name="linking",
                          timeout=240)
    records = synthetic_records(CONNECTIONS, seed=11)
    try:
        client = InterferenceClient(server.target)
        client.wait_ready(120)
        # every worker started up (the supervisor's one SERVING line): each query below opens its own
        # connection, which the kernel may give to either worker (health SERVING on one is not enough)
        server.wait_for("; SERVING", timeout=120)
        # the learner's every thread yields the cores to the workers; the workers keep the normal class
        for role, policy, nice in (("learner", os.SCHED_BATCH, 3), ("worker", os.SCHED_OTHER, 0)):
            for pid in pids(server, role).values():
                assert thread_priorities(pid) == {(policy, os.getpriority(os.PRIO_PROCESS, 0) + nice)}, role
        # and on the CPUs given: the learner's every thread on its own, each worker's on one of theirs
        # (--pin-workers: round robin, so two workers on two CPUs where there are two)
        def affinities(pid: int) -> set[frozenset[int]]:
            return {frozenset(os.sched_getaffinity(int(t))) for t in os.listdir(f"/proc/{pid}/task")}

        for pid in pids(server, "learner").values():
            assert affinities(pid) == {frozenset(learner_cpus)}
        held = [affinities(pid) for pid in pids(server, "worker").values()]
        assert all(len(cpus) == 1 and len(next(iter(cpus))) == 1 and next(iter(cpus)) <= worker_cpus for cpus in held)
        assert len({next(iter(cpus)) for cpus in held}) == min(2, len(worker_cpus))
        assert client.status().answers_remembered == 0
        for i, record in enumerate(records):  # a connection each: both workers answer some
            via = connection(server.target)
            query = Query(record.device, record.batch, device_kind=record.device_kind,
                          co_runner_source=CoRunnerSource.EXPLICIT, batch_id=f"job-{i}")
            assert via.predict(query).latency_ms > 0
            via.channel.close()
        wait_for(lambda: client.status().answers_remembered == CONNECTIONS, 30, "answers forwarded to the learner")
        for pid in pids(server, "worker").values():  # answering needs neither scikit-learn nor river's drift
            assert not [line for line in Path(f"/proc/{pid}/maps").read_text().splitlines() if "/sklearn/" in line]
        report = client.report_observations([(r, f"job-{i}") for i, r in enumerate(records)]
                                            + [(synthetic_records(1, seed=12)[0], "job-never-answered")], timeout=60)
        assert report.accepted == CONNECTIONS + 1
        status = client.status()
        assert (status.answers_linked, status.answers_remembered) == (CONNECTIONS, 0)
    finally:
        assert server.stop(timeout=60) == 0


def thread_priorities(pid: int) -> set[tuple[int, int]]:
    """The distinct ``(scheduling class, niceness)`` of process ``pid``'s threads."""
    tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    return {(os.sched_getscheduler(t), os.getpriority(os.PRIO_PROCESS, t)) for t in tids}


@pytest.mark.parametrize("nice", [-1, 20])
def test_serve_refuses_a_learner_niceness_out_of_range(nice, capsys):
    from predictor.rpc.processes.options import ServeOptions
    from predictor.rpc.processes.serve import serve
    from predictor.service import ServiceConfig

    assert serve(ServiceConfig(), ServeOptions(workers=2, learner_nice=nice)) == 2
    assert f"--learner-nice must be in 0..19, got {nice}" in capsys.readouterr().err


def test_serve_refuses_an_unknown_learner_policy(capsys):
    from predictor.rpc.processes.options import ServeOptions
    from predictor.rpc.processes.serve import serve
    from predictor.service import ServiceConfig

    assert serve(ServiceConfig(), ServeOptions(workers=2, learner_policy="fast")) == 2
    assert "--learner-policy must be one of normal, batch, idle, got 'fast'" in capsys.readouterr().err

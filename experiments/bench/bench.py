"""One benchmark of the data path: every figure beside its floor, measured in the same run.

Prints one table. Each row is a figure of this project and the floor it is
judged against, both measured here, now, on the same input:

* **replay** of the default ``rls`` predictor, record by record
  (``predictor replay LOG --prequential --reference`` in-process) against merely
  reading the same gzip JSONL file with the standard library (``gzip`` +
  ``json.loads`` per line); and the compiled replay, ``predictor replay --prequential``'s
  default (:mod:`predictor.prequential.blocks`: typed decoding, the RLS steps and the
  non-negative projection compiled over blocks, learned on a second thread while the file is
  inflated on a third), on one thread (``--serial``), and with the ``fine`` and ``coarse``
  feature sets (the fastest configuration; each with its MAPE, the price of its speed), and
  the ``sgd`` predictor (its steps compiled too), against the same floor;
* **ingest** (``ReportObservations``, one client stream of 256-record messages, the
  service with a state folder: the observation log on, fsynced before each acknowledgement)
  against a client-streaming echo server (:mod:`experiments.bench.echo_server`) that
  decodes the same messages and answers a canned response;
* **PredictLatency under ingest**: the p99 of one sequential PredictLatency client while
  a second client streams observations (256-record messages) into the same service,
  against the same client's p99 with no ingest (answers come from published model
  versions, :mod:`predictor.service.published`, so learning should not stall them);
* **PredictLatency** (one sequential client, p50) and **RankPlacements** with
  1,024 candidates (the classic and the packed request form) against a unary
  echo of the same request bytes returning a response of the same size;
* the same two calls answered by the service's RPC layer alone (its server, interceptors and
  error handling, answering a recorded response: :mod:`experiments.bench.rpc_servers`), against the
  same echo: the rest of the service's gap to the echo is computing the answer;
* **PredictLatency at a steady rate** (2,000 calls/s, open loop: each call sent at its scheduled
  time from one ``grpc.aio`` client process, latency from that time) against the echo offered
  the same rate: the p99, and how many calls were answered;
* **overload**: the service started with a bounded in-flight limit (2 handler threads, as
  ``predictor serve`` runs) and offered twice its capacity (the rate it answers when offered
  far more), open loop: how fast the refusals (``RESOURCE_EXHAUSTED``) come back and the p99
  of the calls it answers, each against the echo's p99 at the same offered rate;
* **RLS update+predict** (ours, per observation, and the compiled block kernel)
  against river's ``BayesianLinearRegression`` on the same 12-feature stream.

The servers run in their own processes (:mod:`experiments.bench.rpc_servers`), the
clients in others (:mod:`experiments.bench.rpc_load`); service and echo are measured
one after the other, twice, and the better of the two kept for each; each replay
figure, like its floor, is the better of two runs too. Timings
on a shared machine are noisy: read the ratios, which are taken within one run.

Run: ``.venv/bin/python -m experiments.bench.bench`` (about 2 minutes; ``--quick``: a few
seconds, small inputs, what the test runs; ``--json PATH`` also writes the rows).
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import math
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from experiments.bench.bench_replay import resample
from experiments.common import DEFAULT_DATASET, machine
from predictor.runtime.threads import pin_blas_threads


@dataclasses.dataclass(frozen=True)
class Settings:
    """Sizes and durations of one run (``--quick`` shrinks them)."""

    replay_records: int = 50_000
    rls_observations: int = 5_000
    rpc_seconds: float = 2.0
    candidates: int = 1024
    ingest_records: int = 25_600
    ingest_batch: int = 256
    steady_rate: float = 2_000.0
    overload_limit: int = 4
    saturating_rate: float = 6_000.0
    rounds: int = 2
    seed: int = 0


QUICK = Settings(replay_records=1_500, rls_observations=300, rpc_seconds=0.3, ingest_records=2_560,
                 rounds=1)


@dataclasses.dataclass
class Row:
    """One line of the table: a figure, its floor, and the target it is held to."""

    name: str
    value: float
    unit: str
    floor_name: str
    floor: float
    higher_is_better: bool = True
    target: str = ""

    @property
    def ratio(self) -> float:
        """The figure over its floor (a throughput ratio, or a latency ratio)."""
        return self.value / self.floor if self.floor else math.nan


# ----------------------------------------------------------------------------- in-process figures


def _rate(count: int, seconds: float) -> float:
    return count / max(seconds, 1e-9)


def _fastest(measure: Callable[[], tuple], rounds: int) -> tuple:
    """The run of ``measure`` (a rate first, then what it computed) with the highest rate of ``rounds``:
    a figure is the better of as many runs as its floor (the same arithmetic every run)."""
    return max((measure() for _ in range(max(rounds, 1))), key=lambda run: run[0])


def json_floor(log: Path) -> float:
    """Records/s of only gunzipping and ``json.loads``-ing every line of ``log``."""
    begin = time.perf_counter()
    n = 0
    with gzip.open(log, "rt", encoding="utf-8") as stream:
        for line in stream:
            json.loads(line)
            n += 1
    return _rate(n, time.perf_counter() - begin)


def _json_records(log: Path) -> Any:
    """The records of ``log`` decoded as before the typed decoder: ``json.loads`` + ``parse_record``."""
    from predictor.records.record import parse_record

    with gzip.open(log, "rt", encoding="utf-8") as stream:
        for line in stream:
            yield parse_record(json.loads(line))


def replay_reference(log: Path, spec: str = "rls", typed: bool = True) -> tuple[float, np.ndarray]:
    """Records/s of ``predictor replay LOG --prequential`` in-process, and its predictions
    (``typed=False``: decoded by ``json.loads`` and the rules, the path before the typed decoder)."""
    from predictor.predictors import create
    from predictor.prequential.evaluation import run_prequential
    from predictor.records.logio import iter_records

    begin = time.perf_counter()
    scored = run_prequential(create(spec), iter_records(log) if typed else _json_records(log))
    return _rate(len(scored.predicted), time.perf_counter() - begin), np.asarray(scored.predicted)


def replay_fast(log: Path, spec: str = "rls", overlap: bool = True) -> tuple[float, np.ndarray, float]:
    """Records/s of the fast replay (typed decoding, block features, compiled kernel; with ``overlap``
    each block learned on a second thread, as ``predictor replay --prequential`` does), its predictions
    and their MAPE."""
    from predictor.prequential.blocks import fast_prequential
    from predictor.prequential.evaluation import summarize

    fast_prequential(log, spec, limit=64)  # compile (cached on disk) outside the timing
    begin = time.perf_counter()
    scored = fast_prequential(log, spec, overlap=overlap)
    rate = _rate(len(scored.predicted), time.perf_counter() - begin)
    return rate, np.asarray(scored.predicted), float(summarize(scored)["mape"])


def feature_stream(n: int, seed: int, width: int = 12) -> list[tuple[dict[str, float], float]]:
    """``n`` observations of ``width`` named features with a noisy linear target."""
    rng = np.random.default_rng(seed)
    names = [f"f{i}" for i in range(width)]
    weights = rng.normal(size=width)
    x = rng.normal(size=(n, width))
    y = x @ weights + 0.1 * rng.normal(size=n)
    return [(dict(zip(names, row.tolist(), strict=True)), float(t)) for row, t in zip(x, y, strict=True)]


def _stream_rate(model: Any, stream: list[tuple[dict[str, float], float]]) -> float:
    begin = time.perf_counter()
    for x, y in stream:
        model.predict_one(x)
        model.learn_one(x, y)
    return _rate(len(stream), time.perf_counter() - begin)


def rls_rates(n: int, seed: int) -> dict[str, float]:
    """Observations/s of predict+learn: river's BayesianLinearRegression, our RLS, the compiled block kernel."""
    from river import linear_model

    from predictor.regressors.least_squares import RLS
    from predictor.regressors.rls_kernel import learn_block

    stream = feature_stream(n, seed)
    out = {"river": max(_stream_rate(linear_model.BayesianLinearRegression(), stream) for _ in range(2)),
           "rls": max(_stream_rate(RLS(), stream) for _ in range(2))}
    names = tuple(stream[0][0])
    x = np.array([[row[k] for k in names] for row, _ in stream])
    y = np.array([t for _, t in stream])
    learn_block(RLS(), names, x[:8], y[:8])  # compile outside the timing
    best = 0.0
    for _ in range(2):
        begin = time.perf_counter()
        learn_block(RLS(), names, x, y)
        best = max(best, _rate(n, time.perf_counter() - begin))
    out["kernel"] = best
    return out


# ----------------------------------------------------------------------------- RPC figures


def rpc_rows(settings: Settings) -> list[Row]:
    """Service against echo: PredictLatency p50, RankPlacements (both forms), ingest, overload."""
    from experiments.bench import bench_rpc
    from experiments.bench.echo_server import method_path
    from experiments.bench.rpc_load import ClientPool
    from experiments.bench.rpc_servers import ServerProcess, echo_main, service_main
    from predictor.rpc.names import METHOD_PREFIX

    config = bench_rpc.Config(candidates=settings.candidates, ingest_records=settings.ingest_records,
                              ingest_batch=settings.ingest_batch, seed=settings.seed)
    requests = bench_rpc.build_requests(config)
    packed = packed_rank_requests(requests["RankPlacements"])
    state = tempfile.TemporaryDirectory(prefix="bench-state-")
    spec = {"predictor": "rls", "outlier_gate": True, "warm_records": 2000, "seed": settings.seed,
            "devices": bench_rpc.DEVICES, "server": "thread", "max_workers": 8, "metrics": True,
            "max_candidates": settings.candidates, "state_dir": state.name}
    servers: list[ServerProcess] = []
    pool = ClientPool(2)
    try:
        service = ServerProcess(service_main, spec)
        servers.append(service)
        canned = bench_rpc.canned_responses(service.target, requests)
        echo = ServerProcess(echo_main, {"max_workers": 8, "server": "thread",
                                         "unary": {k: v for k, v in canned.items() if k != "ReportObservations"},
                                         "streams": {"ReportObservations": canned["ReportObservations"]}})
        servers.append(echo)
        # the service's RPC layer answering recorded responses: what is left of the gap to the echo
        # is the answer's computation
        layer = ServerProcess(service_main, {**spec, "warm_records": 0, "state_dir": None, "canned": {
            k: canned[k] for k in ("PredictLatency", "RankPlacements")}})
        servers.append(layer)
        # the service as `predictor serve --handler-cpus FIRST` runs it (where there are 2 CPUs or more)
        cpus = sorted(os.sched_getaffinity(0))
        split = ServerProcess(service_main, {**spec, "state_dir": None, "handler_cpus": cpus[:1]}) if len(cpus) > 1 else None
        if split is not None:
            servers.append(split)

        def closed(server: ServerProcess, path: str, payloads: list[bytes]) -> dict:
            return bench_rpc.measure(pool, server, [{"kind": "closed", "path": path, "requests": payloads,
                                                     "duration_s": settings.rpc_seconds}])

        def best(measure: Callable[[], dict], key: str, lower: bool) -> dict:
            runs = [measure() for _ in range(settings.rounds)]
            return (min if lower else max)(runs, key=lambda r: r[key])

        rows = []
        for name in ("PredictLatency",):
            echo_r = best(lambda n=name: closed(echo, method_path(n), requests[n]), "p50_ms", True)
            svc_r = best(lambda n=name: closed(service, METHOD_PREFIX + n, requests[n]), "p50_ms", True)
            layer_r = best(lambda n=name: closed(layer, METHOD_PREFIX + n, requests[n]), "p50_ms", True)
            rows.append(Row(f"{name} p50, 1 sequential client", svc_r["p50_ms"], "ms", "unary echo, same bytes",
                            echo_r["p50_ms"], higher_is_better=False, target="≤ 1.3×"))
            rows.append(Row(f"{name} server CPU per call, 1 sequential client (every thread of the process)",
                            svc_r["server_cpu_us_per_call"], "µs", "unary echo, same bytes",
                            echo_r["server_cpu_us_per_call"], higher_is_better=False,
                            target="(what bounds the rate one process answers)"))
            rows.append(Row(f"{name} p50, recorded answer through the service's RPC layer", layer_r["p50_ms"],
                            "ms", "unary echo, same bytes", echo_r["p50_ms"], higher_is_better=False,
                            target="(the RPC layer alone)"))
            if split is not None:
                split_r = best(lambda n=name: closed(split, METHOD_PREFIX + n, requests[n]), "p50_ms", True)
                rows.append(Row(f"{name} p50, 1 sequential client, --handler-cpus {cpus[0]}", split_r["p50_ms"], "ms",
                                "unary echo, same bytes", echo_r["p50_ms"], higher_is_better=False, target="≤ 1.3×"))
                rows.append(Row(f"{name} server CPU per call, the same", split_r["server_cpu_us_per_call"], "µs",
                                "unary echo, same bytes", echo_r["server_cpu_us_per_call"], higher_is_better=False,
                                target="(what bounds the rate one process answers)"))
        n = settings.candidates
        echo_r = best(lambda: closed(echo, method_path("RankPlacements"), requests["RankPlacements"]), "per_s", False)
        for label, payloads in (("classic", requests["RankPlacements"]), ("packed", packed)):
            svc_r = best(lambda p=payloads: closed(service, METHOD_PREFIX + "RankPlacements", p), "per_s", False)
            rows.append(Row(f"RankPlacements {n} candidates ({label} form)", svc_r["per_s"] * n, "cand/s",
                            "unary echo of the classic request, same-size answer", echo_r["per_s"] * n,
                            target="≥ 500,000/s, ≥ 0.5×"))
        if split is not None:
            split_r = best(lambda: closed(split, METHOD_PREFIX + "RankPlacements", packed), "per_s", False)
            rows.append(Row(f"RankPlacements {n} candidates (packed form), --handler-cpus {cpus[0]}",
                            split_r["per_s"] * n, "cand/s", "unary echo of the classic request, same-size answer",
                            echo_r["per_s"] * n, target="≥ 500,000/s, ≥ 0.5×"))
        layer_r = best(lambda: closed(layer, METHOD_PREFIX + "RankPlacements", packed), "per_s", False)
        rows.append(Row(f"RankPlacements {n} candidates (packed form), recorded answer through the service's "
                        "RPC layer", layer_r["per_s"] * n, "cand/s", "unary echo of the classic request, "
                        "same-size answer", echo_r["per_s"] * n, target="(the RPC layer alone)"))
        stream = "ReportObservations (batched)"
        echo_r = best(lambda: bench_rpc.measure(pool, echo, [{"kind": "stream", "path": method_path(
            "ReportObservations"), "messages": requests[stream]}]), "per_s", False)
        svc_r = best(lambda: bench_rpc.measure(pool, service, [{"kind": "stream", "path": METHOD_PREFIX
                                                                + "ReportObservations",
                                                                "messages": requests[stream]}]), "per_s", False)
        total = settings.ingest_records
        rows.append(Row(f"ingest, {settings.ingest_batch}-record messages, 1 stream", svc_r["per_s"] * total,
                        "rec/s", "client-streaming echo, same messages", echo_r["per_s"] * total,
                        target="≥ 50,000/s, ≥ 0.5×"))
        rows.append(predict_under_ingest(settings, pool, service, requests["PredictLatency"], requests[stream]))
        rows.append(steady_row(settings, pool, service, echo, requests["PredictLatency"]))
        service.stop()  # the overload's service runs alone beside the echo
        servers.remove(service)
        rows += overload_rows(settings, pool, echo, requests["PredictLatency"])
    finally:
        for server in servers:
            server.stop()
        pool.close()
        state.cleanup()
    return rows


def predict_under_ingest(settings: Settings, pool: Any, service: Any, predict: list[bytes],
                         messages: list[bytes], repeats: int = 3) -> Row:
    """PredictLatency p99 of one sequential client while a second client streams ``messages``
    (``repeats`` times over, so that the stream outlasts the queries) into the same service,
    against the same client's p99 alone; the better of ``settings.rounds`` runs of each."""
    from predictor.rpc.names import METHOD_PREFIX

    query = {"kind": "closed", "path": METHOD_PREFIX + "PredictLatency", "requests": predict,
             "duration_s": settings.rpc_seconds, "target": service.target}
    stream = {"kind": "stream", "path": METHOD_PREFIX + "ReportObservations", "messages": messages * repeats,
              "target": service.target}
    records = settings.ingest_records * repeats

    def p99(results: list[dict]) -> float:
        return 1e3 * float(np.percentile(results[0]["latency"], 99))

    alone = min(p99(pool.run([query])) for _ in range(settings.rounds))
    busy, rate = math.inf, 0.0
    for _ in range(settings.rounds):
        results = pool.run([query, stream])
        if p99(results) < busy:
            busy, rate = p99(results), records / results[1]["elapsed"]
    return Row(f"PredictLatency p99 while 1 client ingests ({rate:,.0f} rec/s)", busy, "ms",
               "the same client's p99, no ingest", alone, higher_is_better=False, target="≤ 1.3×")


def packed_rank_requests(payloads: list[bytes]) -> list[bytes]:
    """The same RankPlacements requests in the packed form, with per-candidate detail omitted."""
    from predictor.rpc import columns
    from predictor.rpc.protos import pb2

    messages = pb2()
    out = []
    for payload in payloads:
        request = messages.RankPlacementsRequest.FromString(payload)
        out.append(columns.pack_rank_request(request, omit_detail=True).SerializeToString())
    return out


def open_loop(pool: Any, target: str, path: str, payloads: list[bytes], rate: float, seconds: float,
              clients: int = 1) -> dict[str, Any]:
    """``payloads`` (cycled) sent to ``target`` (``host:port``) at ``rate`` calls/s in all for
    ``seconds`` from ``clients`` ``grpc.aio`` client processes (each ``rate / clients``), each call at its
    scheduled time whatever became of the earlier ones; per outcome, how many calls and their p99 latency
    from the scheduled send (corrected for coordinated omission), and the answered calls' p50."""
    import grpc

    task = {"kind": "open_async", "path": path, "requests": payloads, "rate": rate / clients,
            "duration_s": seconds, "target": target, "timeout_s": 10.0}
    results = pool.run([task] * clients)
    codes = np.concatenate([r["codes"] for r in results])
    latency = np.concatenate([r["corrected"] for r in results])
    answered, refused = codes == 0, codes == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]

    def percentile(values: np.ndarray, q: float) -> float:
        return 1e3 * float(np.percentile(values, q)) if values.size else math.nan

    return {"calls": codes.size, "answered": int(answered.sum()), "refused": int(refused.sum()),
            "other": int((~answered & ~refused).sum()),
            "answered_per_s": answered.sum() / max(r["elapsed"] for r in results),
            "answered_p50_ms": percentile(latency[answered], 50), "answered_p99_ms": percentile(latency[answered], 99),
            "refused_p99_ms": percentile(latency[refused], 99)}


def steady_row(settings: Settings, pool: Any, service: Any, echo: Any, payloads: list[bytes]) -> Row:
    """PredictLatency offered at a steady ``settings.steady_rate`` calls/s: its p99 against the echo's at the
    same rate, the better of ``settings.rounds`` runs of each."""
    from experiments.bench.echo_server import method_path
    from predictor.rpc.names import METHOD_PREFIX

    rate, seconds = settings.steady_rate, settings.rpc_seconds

    def best(server: Any, path: str) -> dict[str, Any]:
        runs = [open_loop(pool, server.target, path, payloads, rate, seconds) for _ in range(settings.rounds)]
        return min(runs, key=lambda r: (r["calls"] - r["answered"], r["answered_p99_ms"]))

    answered = best(service, METHOD_PREFIX + "PredictLatency")
    floor = best(echo, method_path("PredictLatency"))
    return Row(f"PredictLatency p99 at a steady {rate:,.0f} calls/s (open loop; {answered['answered']:,} of "
               f"{answered['calls']:,} answered)", answered["answered_p99_ms"], "ms",
               "unary echo at the same rate", floor["answered_p99_ms"], higher_is_better=False,
               target="≤ 1.3×, every call answered")


def overload_rows(settings: Settings, pool: Any, echo: Any, payloads: list[bytes]) -> list[Row]:
    """A service allowing ``settings.overload_limit`` calls in flight (2 handler threads, in a process of its
    own, as ``predictor serve`` runs it) offered twice its capacity: how soon the excess is refused, and the
    p99 of the calls it answers, each against the echo's p99 offered the same rate.

    The capacity is the rate the service answers when offered ``settings.saturating_rate`` calls/s. Where
    twice that is all answered (the capacity was measured in a busy moment, or refusing the saturating
    offer cost the answers CPU), the offer doubles again, up to 8×: the row says which multiple it took."""
    from experiments.bench import bench_rpc
    from experiments.bench.echo_server import method_path
    from experiments.bench.rpc_servers import ServerProcess, service_main
    from predictor.rpc.names import METHOD_PREFIX

    spec = {"predictor": "rls", "warm_records": 500, "seed": settings.seed, "devices": bench_rpc.DEVICES,
            "metrics": True, "max_workers": 2, "max_concurrent_rpcs": settings.overload_limit,
            "max_candidates": 1024}
    path, seconds = METHOD_PREFIX + "PredictLatency", settings.rpc_seconds
    server = ServerProcess(service_main, spec)
    try:
        capacity = open_loop(pool, server.target, path, payloads, settings.saturating_rate, seconds)["answered_per_s"]
        factor = 2
        while True:
            offered = factor * capacity
            service = open_loop(pool, server.target, path, payloads, offered, seconds)
            if service["refused"] or factor >= 8:
                break
            factor *= 2
    finally:
        server.stop()
    floor = open_loop(pool, echo.target, method_path("PredictLatency"), payloads, offered, seconds)
    counts = (f"refused {service['refused']:,}, answered {service['answered']:,}, "
              f"other errors {service['other']}")
    name = f"overload: offered {factor}× capacity ({offered:,.0f} calls/s), limit {settings.overload_limit} in flight"
    return [Row(f"{name}, refusals' p99", service["refused_p99_ms"], "ms", "unary echo's p99, same rate",
                floor["answered_p99_ms"], higher_is_better=False, target=f"≤ 1 ms; {counts}"),
            Row(f"{name}, answered calls' p99", service["answered_p99_ms"], "ms", "same",
                floor["answered_p99_ms"], higher_is_better=False, target="≤ 1.3×")]


# ----------------------------------------------------------------------------- the run


def run(settings: Settings, console: Console, parts: tuple[str, ...] = ("replay", "rls", "rpc")) -> list[Row]:
    """Measure every figure of ``parts`` with its floor; returns the rows in table order."""
    rows: list[Row] = []
    if "replay" in parts:
        with tempfile.TemporaryDirectory() as folder:
            log = Path(folder) / "replay.jsonl.gz"
            resample(str(DEFAULT_DATASET), log, settings.replay_records, settings.seed)
            console.print(f"replay: {settings.replay_records:,} records ...")
            floor = max(json_floor(log) for _ in range(settings.rounds))
            floor_name = "gzip + json.loads of the same file"
            rounds = settings.rounds
            before, _ = _fastest(lambda: replay_reference(log, typed=False), rounds)
            reference, predicted = _fastest(lambda: replay_reference(log), rounds)
            fast, fast_predicted, default_mape = _fastest(lambda: replay_fast(log), rounds)
            serial, _, _ = _fastest(lambda: replay_fast(log, overlap=False), rounds)
            fine, _, fine_mape = _fastest(lambda: replay_fast(log, "rls:features='fine'"), rounds)
            coarse, _, coarse_mape = _fastest(lambda: replay_fast(log, "rls:features='coarse'"), rounds)
            sgd, _, sgd_mape = _fastest(lambda: replay_fast(log, "sgd"), rounds)
            agree = float(np.max(np.abs(fast_predicted - predicted) / predicted)) if predicted.size else 0.0
            rows.append(Row("replay rls, json.loads + rules decoding (before)", before, "rec/s", floor_name, floor))
            rows.append(Row("replay rls, per record (predictor replay --prequential --reference)", reference, "rec/s",
                            floor_name, floor, target="≥ 50,000/s, ≥ 0.8×"))
            rows.append(Row(f"replay rls, compiled blocks, one thread (--serial; MAPE {default_mape:.1%})", serial,
                            "rec/s", floor_name, floor, target="≥ 50,000/s, ≥ 0.8×"))
            rows.append(Row(f"replay rls, compiled blocks learned on a second thread (predictor replay --prequential;"
                            f" max rel. diff {agree:.0e})", fast, "rec/s",
                            floor_name, floor, target="≥ 50,000/s, ≥ 0.8×"))
            rows.append(Row(f"replay rls:features='fine', the same (MAPE {fine_mape:.1%})", fine, "rec/s", floor_name,
                            floor, target="≥ 100,000/s"))
            rows.append(Row(f"replay rls:features='coarse', the same (fastest; MAPE {coarse_mape:.1%})", coarse,
                            "rec/s", floor_name, floor, target="≥ 100,000/s"))
            rows.append(Row(f"replay sgd, compiled blocks, the same (MAPE {sgd_mape:.1%})", sgd, "rec/s", floor_name,
                            floor))
    if "rls" in parts:
        console.print(f"RLS: {settings.rls_observations:,} observations ...")
        rates = rls_rates(settings.rls_observations, settings.seed)
        rows.append(Row("RLS predict+learn, 12 features, per observation", rates["rls"], "obs/s",
                        "river BayesianLinearRegression, same stream", rates["river"], target="≥ 10×"))
        rows.append(Row("RLS predict+learn, 12 features, compiled block", rates["kernel"], "obs/s",
                        "river BayesianLinearRegression, same stream", rates["river"], target="≥ 10×"))
    if "rpc" in parts:
        console.print("RPC: service and echo servers ...")
        rows += rpc_rows(settings)
    return rows


def _format(value: float, unit: str) -> str:
    return f"{value:,.3f} {unit}" if value < 100 else f"{value:,.0f} {unit}"


def table(rows: list[Row], title: str) -> Table:
    """The rows as one rich table."""
    out = Table(title=title)
    for column in ("figure", "measured", "floor (same run)", "floor value", "figure / floor", "target"):
        out.add_column(column, justify="right" if column in ("measured", "floor value", "figure / floor") else "left")
    for row in rows:
        ratio = f"{row.ratio:.2f}× " + ("(throughput)" if row.higher_is_better else
                                       "(latency)" if row.unit.startswith("ms") else "(cost)")
        out.add_row(row.name, _format(row.value, row.unit), row.floor_name, _format(row.floor, row.unit.split()[0]),
                    ratio, row.target)
    return out


def main(argv: list[str] | None = None) -> list[Row]:
    """Parse the command line, run, print the table (and write ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small inputs, a few seconds (the test's run)")
    parser.add_argument("--parts", default="replay,rls,rpc", help="comma-separated subset of replay,rls,rpc")
    parser.add_argument("--replay-records", type=int, default=None, help="records in the replayed log")
    parser.add_argument("--json", dest="json_out", default=None, help="also write the rows here as JSON")
    parser.add_argument("--blas-threads", type=int, default=None, help="BLAS threads (default 1)")
    args = parser.parse_args(argv)
    pin_blas_threads(args.blas_threads)
    settings = QUICK if args.quick else Settings()
    if args.replay_records:
        settings = dataclasses.replace(settings, replay_records=args.replay_records)
    console = Console(width=max(Console().width, 160))
    begin = time.perf_counter()
    rows = run(settings, console, tuple(p.strip() for p in args.parts.split(",") if p.strip()))
    ran_on = machine()
    console.print(table(rows, f"the data path beside its floors (one run, {time.perf_counter() - begin:.0f} s; "
                              f"{ran_on['cpu']}, {ran_on['cores']} cores)"))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps([dataclasses.asdict(r) | {"ratio": r.ratio} for r in rows],
                                                  indent=2) + "\n")
    return rows


if __name__ == "__main__":
    main()

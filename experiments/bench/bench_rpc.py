"""RPC performance: the real service over gRPC against a bare echo service on the same stack.

Starts, each in its own process, the real service (as ``predictor serve``
builds it: thread-pool server, Prometheus metrics, auth and decoding
interceptors, health, reflection; warmed up on ``warm_records`` synthetic
observations) and an echo service (:mod:`experiments.bench.echo_server`) that decodes the
same requests and answers canned responses of the same sizes, taken from the
service in the same run. Separate client processes (:mod:`experiments.bench.rpc_load`)
drive both, interleaved, ``repeats`` times:

* ``PredictLatency`` and ``CheckDeadline`` (a pool of queries with 0 to 2
  explicit co-runners, given by overlap or by remaining time):
  - one sequential client: the single-call latency and its ratio to the echo
    (the single-call overhead);
  - an open loop at ``rate`` requests/s in all from ``clients`` processes:
    p50/p99 from the actual send, and p99 corrected for coordinated omission
    (from the scheduled send);
  - a closed loop from ``clients`` processes: the maximum throughput;
* ``RankPlacements`` with ``candidates`` candidates per call: candidate evaluations/s;
* the ``curve`` phase: ``RankPlacements`` of each size in ``curve`` (16 to 8,192 candidates), in
  the classic form (one ``PlacementCandidate`` message per candidate, one ``Placement`` back) and
  the packed form with ``omit_detail``, one sequential client each, beside one sequential
  ``PredictLatency`` client: server CPU per call and per candidate, the marginal CPU per
  candidate between sizes, and each beside the echo's floor for the same bytes;
* ``ReportObservations``: ``ingest_records`` records in one client stream, one
  record per message and ``ingest_batch`` records per message: records/s;
* with ``aio_floor``, the echo on ``grpc.aio`` against the echo on the thread
  pool: what the asyncio server would give the service at best.

Also the server's CPU time per call (from ``/proc``), which a shared machine
disturbs less than wall-clock latency. Figures are medians over the repeats;
ratios are taken within each repeat, then the median.

Run: ``.venv/bin/python -m experiments.bench.bench_rpc`` (``--repeats 3``, ``--phases unary,rank,ingest``;
``--unary-loads single``: the unary phase's sequential client alone;
the candidate curve alone: ``--phases curve --aio-floor false``)
"""

from __future__ import annotations

import dataclasses
import statistics
from typing import Any

import grpc
import numpy as np
from rich.console import Console
from rich.table import Table

from experiments.bench.echo_server import method_path
from experiments.bench.rpc_load import ClientPool
from experiments.bench.rpc_servers import ServerProcess, echo_main, service_main
from experiments.common import finish, start
from predictor.predictors import DEFAULT
from predictor.records.record import BatchSpec
from predictor.rpc import columns, convert
from predictor.rpc.names import METHOD_PREFIX
from predictor.rpc.protos import pb2
from predictor.service.synthetic import MODELS, synthetic_records
from predictor.service.types import Candidate, CoRunnerSource, PlannedCoRunner, Query

TARGETS = {"p99_ms": 1.0, "overhead_ratio": 1.5, "rank_evals_per_s": 200_000, "ingest_records_per_s": 20_000,
           "classic_cpu_us_per_candidate": 3.0, "classic_echo_ratio": 3.0, "packed_candidates_per_s": 500_000,
           "small_rank_vs_predict_cpu": 1.5, "marginal_flatness": 1.2, "single_p50_ratio": 1.3,
           "single_cpu_ratio": 1.5}
UNARY = ("PredictLatency", "CheckDeadline")
CURVE_FORMS = ("", "Packed")  # classic (repeated candidates, detailed answer); packed with omit_detail
STREAMS = ("ReportObservations", "ReportObservations (batched)")


@dataclasses.dataclass(frozen=True)
class Config:
    """The study's settings; each field is also a ``--field`` option."""

    predictor: str = DEFAULT  # the service's default learner
    outlier_gate: bool = True
    warm_records: int = 3000
    n_queries: int = 64
    clients: int = 4
    rate: float = 2000.0
    single_s: float = 3.0
    open_s: float = 5.0
    closed_s: float = 3.0
    candidates: int = 500
    rank_s: float = 4.0
    ingest_records: int = 20_000
    ingest_batch: int = 100
    repeats: int = 3
    max_workers: int = 8
    metrics: bool = True
    aio_floor: bool = True
    phases: tuple[str, ...] = ("unary", "rank", "ingest")
    unary_loads: tuple[str, ...] = ("single", "open", "closed")  # which loads the unary phase runs
    curve: tuple[int, ...] = (16, 128, 1024, 8192)
    curve_s: float = 2.0
    seed: int = 0


# ----------------------------------------------------------------------------- the workload

DEVICES = tuple(f"sim{i}" for i in range(16))


def _runners(rng: np.random.Generator) -> tuple[PlannedCoRunner, ...]:
    names = sorted(MODELS)
    runners = []
    for _ in range(int(rng.integers(0, 3))):
        other = names[rng.integers(len(names))]
        l2, dram, _ = MODELS[other]
        attrs = {"l2_util": l2, "dram_util": dram}
        if rng.random() < 0.5:
            runners.append(PlannedCoRunner(other, int(rng.integers(1, 9)), attrs, overlap=float(rng.uniform(0.1, 1))))
        else:
            runners.append(
                PlannedCoRunner(other, int(rng.integers(1, 9)), attrs, remaining_ms=float(rng.uniform(1, 20)))
            )
    return tuple(runners)


def _batch(rng: np.random.Generator) -> BatchSpec:
    names = sorted(MODELS)
    model = names[rng.integers(len(names))]
    l2, dram, _ = MODELS[model]
    return BatchSpec(model, int(rng.integers(1, 9)), {"l2_util": l2, "dram_util": dram})


def build_requests(config: Config) -> dict[str, list[bytes]]:
    """Serialised requests of every method (a pool of ``n_queries`` for the unary scheduler calls)."""
    messages = pb2()
    rng = np.random.default_rng(config.seed)
    queries = [
        Query(DEVICES[i % len(DEVICES)], _batch(rng), device_kind="SimGPU", co_runners=_runners(rng),
              co_runner_source=CoRunnerSource.EXPLICIT)
        for i in range(config.n_queries)
    ]
    requests: dict[str, list[bytes]] = {
        "PredictLatency": [
            messages.PredictLatencyRequest(query=convert.query_to_pb(q), confidence=0.99).SerializeToString()
            for q in queries
        ],
        "CheckDeadline": [
            messages.CheckDeadlineRequest(query=convert.query_to_pb(q), deadline_ms=30.0, confidence=0.99)
            .SerializeToString()
            for q in queries
        ],
    }
    ranks = []
    for _ in range(4):
        candidates = [
            Candidate(DEVICES[i % len(DEVICES)], "SimGPU", _runners(rng), CoRunnerSource.EXPLICIT)
            for i in range(config.candidates)
        ]
        ranks.append(
            messages.RankPlacementsRequest(
                batch=convert.batch_to_pb(_batch(rng)),
                candidates=[convert.candidate_to_pb(c) for c in candidates],
                deadline_ms=30.0,
                confidence=0.99,
            ).SerializeToString()
        )
    requests["RankPlacements"] = ranks
    for size in config.curve if "curve" in config.phases else ():
        classic = [_rank_request(rng, size) for _ in range(2)]
        requests[f"RankPlacements_{size}"] = [r.SerializeToString() for r in classic]
        requests[f"RankPlacementsPacked_{size}"] = [
            columns.pack_rank_request(r, omit_detail=True).SerializeToString() for r in classic]
    records = [convert.record_to_pb(r) for r in synthetic_records(config.ingest_records, seed=config.seed + 1,
                                                                   devices=DEVICES)]
    requests["ReportObservations"] = [
        messages.ReportObservationsRequest(record=r).SerializeToString() for r in records
    ]
    batched = _batched_requests(records, config.ingest_batch)
    if batched is not None:
        requests["ReportObservations (batched)"] = batched
    return requests


def _rank_request(rng: np.random.Generator, size: int) -> Any:
    """A classic ``RankPlacementsRequest`` of ``size`` candidates with 0-2 explicit co-runners each."""
    candidates = [Candidate(DEVICES[i % len(DEVICES)], "SimGPU", _runners(rng), CoRunnerSource.EXPLICIT)
                  for i in range(size)]
    return pb2().RankPlacementsRequest(batch=convert.batch_to_pb(_batch(rng)),
                                       candidates=[convert.candidate_to_pb(c) for c in candidates],
                                       deadline_ms=30.0, confidence=0.99)


def _batched_requests(records: list[Any], size: int) -> list[bytes] | None:
    """Messages of ``size`` records each, when the contract has the repeated ``records`` field."""
    messages = pb2()
    if "records" not in messages.ReportObservationsRequest.DESCRIPTOR.fields_by_name:
        return None
    return [
        messages.ReportObservationsRequest(records=records[i : i + size]).SerializeToString()
        for i in range(0, len(records), size)
    ]


RESPONSE_TYPES = {
    "PredictLatency": ("PredictLatencyRequest", "PredictLatencyResponse"),
    "CheckDeadline": ("CheckDeadlineRequest", "CheckDeadlineResponse"),
    "RankPlacements": ("RankPlacementsRequest", "RankPlacementsResponse"),
    "ReportObservations": ("ReportObservationsRequest", "ReportObservationsResponse"),
}


def canned_responses(target: str, requests: dict[str, list[bytes]]) -> dict[str, tuple[str, str, bytes]]:
    """One real answer of each method, checked, to be replayed by the echo."""
    messages = pb2()
    canned = {}
    curve = {key: RESPONSE_TYPES["RankPlacements"] for key in requests if key.startswith("RankPlacements")}
    options = [("grpc.max_receive_message_length", 64 << 20)]
    with grpc.insecure_channel(target, options=options) as channel:
        for name, (request, response) in {**RESPONSE_TYPES, **curve}.items():
            path = METHOD_PREFIX + name.partition("_")[0].removesuffix("Packed")
            if name == "ReportObservations":
                payload = channel.stream_unary(path)(iter(requests[name][:10]))
                assert getattr(messages, response).FromString(payload).accepted == 10
            else:
                payload = channel.unary_unary(path)(requests[name][0])
                getattr(messages, response).FromString(payload)
            canned[name] = (request, response, payload)
    return canned


# ----------------------------------------------------------------------------- measuring


def _summary(results: list[dict], cpu_s: float) -> dict[str, float]:
    latency = np.concatenate([r["latency"] for r in results]) if "latency" in results[0] else np.zeros(0)
    calls = sum(r["calls"] for r in results)
    elapsed = max(r["elapsed"] for r in results)
    out = {"calls": calls, "errors": sum(r["errors"] for r in results), "per_s": calls / elapsed,
           "server_cpu_us_per_call": 1e6 * cpu_s / calls}
    if latency.size:
        out |= {"p50_ms": 1e3 * float(np.percentile(latency, 50)), "p99_ms": 1e3 * float(np.percentile(latency, 99)),
                "mean_ms": 1e3 * float(latency.mean())}
    if "corrected" in results[0]:
        corrected = np.concatenate([r["corrected"] for r in results])
        out["p99_corrected_ms"] = 1e3 * float(np.percentile(corrected, 99))
    return out


def measure(pool: ClientPool, server: ServerProcess, tasks: list[dict]) -> dict[str, float]:
    """Run ``tasks`` (one per client) on ``server``: calls, errors, rate, latency percentiles, CPU per call."""
    before = server.cpu_seconds()
    results = pool.run([{**t, "target": server.target} for t in tasks])
    return _summary(results, server.cpu_seconds() - before)


def unary_phases(config: Config, pool: ClientPool, server: ServerProcess, path: str, requests: list[bytes]) -> dict:
    """The ``single``, ``open`` and ``closed`` loads of one unary method on ``server``."""
    each = config.rate / config.clients
    loads = {
        "single": lambda: [{"kind": "closed", "path": path, "requests": requests, "duration_s": config.single_s}],
        "open": lambda: [
            {"kind": "open", "path": path, "requests": requests[i::config.clients] or requests, "rate": each,
             "duration_s": config.open_s, "offset_s": i / config.rate}
            for i in range(config.clients)
        ],
        "closed": lambda: [
            {"kind": "closed", "path": path, "requests": requests[i::config.clients] or requests,
             "duration_s": config.closed_s}
            for i in range(config.clients)
        ],
    }
    return {load: measure(pool, server, tasks()) for load, tasks in loads.items() if load in config.unary_loads}


def _pair(service: ServerProcess, echo: ServerProcess, name: str) -> tuple[tuple[str, ServerProcess, str], ...]:
    return (("echo", echo, method_path(name)), ("service", service, METHOD_PREFIX + name))


def run_repeat(config: Config, pool: ClientPool, service: ServerProcess, echo: ServerProcess,
               echo_aio: ServerProcess | None, requests: dict[str, list[bytes]]) -> dict:
    """One round of every phase, each on the echo then on the service."""
    out: dict[str, Any] = {}
    if "unary" in config.phases:
        for name in UNARY:
            out[name] = {label: unary_phases(config, pool, server, path, requests[name])
                         for label, server, path in _pair(service, echo, name)}
    if "rank" in config.phases:
        rank = {}
        for label, server, path in _pair(service, echo, "RankPlacements"):
            rank[label] = measure(pool, server, [{"kind": "closed", "path": path,
                                                  "requests": requests["RankPlacements"], "duration_s": config.rank_s}])
            rank[label]["evals_per_s"] = rank[label]["per_s"] * config.candidates
        out["RankPlacements"] = rank
    if "curve" in config.phases:
        out["curve"] = curve_phase(config, pool, service, echo, requests)
    for stream in STREAMS:
        if stream not in requests or "ingest" not in config.phases:
            continue
        ingest = {}
        for label, server, path in _pair(service, echo, "ReportObservations"):
            result = measure(pool, server, [{"kind": "stream", "path": path, "messages": requests[stream]}])
            ingest[label] = {"records_per_s": config.ingest_records * result["per_s"],
                             "server_cpu_us_per_record": result["server_cpu_us_per_call"] / config.ingest_records,
                             "messages": len(requests[stream])}
        out[stream] = ingest
    if echo_aio is not None:
        out["aio floor"] = aio_floor(config, pool, echo, echo_aio, requests)
    return out


def curve_phase(config: Config, pool: ClientPool, service: ServerProcess, echo: ServerProcess,
                requests: dict[str, list[bytes]]) -> dict:
    """One sequential client per ranking size and form, and one ``PredictLatency`` client, each on the
    echo then on the service: server CPU per call (and per candidate)."""
    out: dict[str, Any] = {}
    keys = ["PredictLatency"] + [f"RankPlacements{form}_{size}" for size in config.curve for form in CURVE_FORMS]
    for key in keys:
        out[key] = {}
        for label, server, path in ((("echo", echo, method_path(key)), ("service", service, METHOD_PREFIX + key))
                                    if key == "PredictLatency" else
                                    (("echo", echo, method_path(key)),
                                     ("service", service, METHOD_PREFIX + "RankPlacements"))):
            result = measure(pool, server, [{"kind": "closed", "path": path, "requests": requests[key],
                                             "duration_s": config.curve_s}])
            size = int(key.rpartition("_")[2]) if "_" in key else 1
            result["server_cpu_us_per_candidate"] = result["server_cpu_us_per_call"] / size
            result["candidates_per_s"] = result["per_s"] * size
            out[key][label] = result
    return out


def curve_ratios(curve: dict) -> dict[str, float]:
    """Within one repeat: each ranking's CPU and time over the echo's, its CPU over one
    PredictLatency call's, and the marginal CPU per candidate between consecutive sizes."""
    out = {}
    predict = curve["PredictLatency"]["service"]["server_cpu_us_per_call"]
    sizes = sorted({int(k.rpartition("_")[2]) for k in curve if "_" in k})
    for form in CURVE_FORMS:
        cpu = {n: curve[f"RankPlacements{form}_{n}"]["service"]["server_cpu_us_per_call"] for n in sizes}
        for n in sizes:
            svc, echo = curve[f"RankPlacements{form}_{n}"]["service"], curve[f"RankPlacements{form}_{n}"]["echo"]
            out[f"rank{form} {n} cpu/echo"] = svc["server_cpu_us_per_call"] / echo["server_cpu_us_per_call"]
            out[f"rank{form} {n} time/echo"] = svc["mean_ms"] / echo["mean_ms"]
            out[f"rank{form} {n} cpu/predict"] = cpu[n] / predict
        pairs = list(zip(sizes, sizes[1:], strict=False))
        marginal = [(cpu[b] - cpu[a]) / (b - a) for a, b in pairs]
        for (a, b), m in zip(pairs, marginal, strict=True):
            out[f"rank{form} marginal {a}-{b}"] = m
        if marginal and min(marginal) > 0:
            out[f"rank{form} marginal max/min"] = max(marginal) / min(marginal)
    return out


def aio_floor(config: Config, pool: ClientPool, echo: ServerProcess, echo_aio: ServerProcess,
              requests: dict[str, list[bytes]]) -> dict:
    """The echo on the thread pool and on ``grpc.aio``: one client, many clients, a stream."""
    path = method_path("CheckDeadline")
    out = {}
    for label, server in (("thread", echo), ("aio", echo_aio)):
        single = measure(pool, server, [{"kind": "closed", "path": path, "requests": requests["CheckDeadline"],
                                         "duration_s": config.single_s}])
        closed = measure(pool, server, [{"kind": "closed", "path": path, "requests": requests["CheckDeadline"],
                                         "duration_s": config.closed_s}] * config.clients)
        stream = measure(pool, server, [{"kind": "stream", "path": method_path("ReportObservations"),
                                         "messages": requests["ReportObservations"]}])
        out[label] = {"single": single, "closed": closed,
                      "stream_messages_per_s": len(requests["ReportObservations"]) * stream["per_s"]}
    return out


def median_of(repeats: list[Any]) -> Any:
    """The element-wise median of nested dicts of numbers (a key over the repeats that have it)."""
    first = repeats[0]
    if isinstance(first, dict):
        keys = dict.fromkeys(k for r in repeats for k in r)
        return {k: median_of([r[k] for r in repeats if k in r]) for k in keys}
    return statistics.median(repeats)


def ratios(repeat: dict) -> dict[str, float]:
    """Service over echo (and aio echo over thread echo), within one repeat."""
    out = {}
    for name in UNARY:
        if name not in repeat:
            continue
        svc, echo = repeat[name]["service"], repeat[name]["echo"]
        if "single" in svc:
            out[f"{name} single p50"] = svc["single"]["p50_ms"] / echo["single"]["p50_ms"]
            out[f"{name} single mean"] = svc["single"]["mean_ms"] / echo["single"]["mean_ms"]
            out[f"{name} server cpu"] = (svc["single"]["server_cpu_us_per_call"]
                                         / echo["single"]["server_cpu_us_per_call"])
        if "open" in svc:
            out[f"{name} open p99"] = svc["open"]["p99_ms"] / echo["open"]["p99_ms"]
        if "closed" in svc:
            out[f"{name} closed throughput"] = svc["closed"]["per_s"] / echo["closed"]["per_s"]
    if "RankPlacements" in repeat:
        rank = repeat["RankPlacements"]
        out["RankPlacements throughput"] = rank["service"]["per_s"] / rank["echo"]["per_s"]
    for stream in STREAMS:
        if stream in repeat:
            out[f"{stream} throughput"] = (repeat[stream]["service"]["records_per_s"]
                                           / repeat[stream]["echo"]["records_per_s"])
    if "curve" in repeat:
        out |= curve_ratios(repeat["curve"])
    if "aio floor" in repeat:
        aio, thread = repeat["aio floor"]["aio"], repeat["aio floor"]["thread"]
        out["aio/thread single p50"] = aio["single"]["p50_ms"] / thread["single"]["p50_ms"]
        out["aio/thread closed throughput"] = aio["closed"]["per_s"] / thread["closed"]["per_s"]
        out["aio/thread stream"] = aio["stream_messages_per_s"] / thread["stream_messages_per_s"]
    return out


def main() -> None:
    """Start the service and echo servers and the clients, run every repeat; print and write the results."""
    config, out = start("bench_rpc", Config(), __doc__.splitlines()[0])
    requests = build_requests(config)
    sizes = {k: int(np.mean([len(b) for b in v])) for k, v in requests.items()}
    spec = {"predictor": config.predictor, "outlier_gate": config.outlier_gate, "warm_records": config.warm_records,
            "seed": config.seed, "devices": DEVICES, "server": "thread", "max_workers": config.max_workers,
            "metrics": config.metrics,
            "max_candidates": max((config.candidates, *(config.curve if "curve" in config.phases else ())))}
    servers: list[ServerProcess] = []
    pool = ClientPool(config.clients)
    try:
        service = ServerProcess(service_main, spec)
        servers.append(service)
        canned = canned_responses(service.target, requests)
        echo_spec = {"max_workers": config.max_workers,
                     "unary": {k: v for k, v in canned.items() if k != "ReportObservations"},
                     "streams": {"ReportObservations": canned["ReportObservations"]}}
        echo = ServerProcess(echo_main, {**echo_spec, "server": "thread"})
        servers.append(echo)
        echo_aio = ServerProcess(echo_main, {**echo_spec, "server": "aio"}) if config.aio_floor else None
        if echo_aio is not None:
            servers.append(echo_aio)
        repeats = []
        for i in range(config.repeats):
            print(f"repeat {i + 1} of {config.repeats} ...", flush=True)
            repeats.append(run_repeat(config, pool, service, echo, echo_aio, requests))
    finally:
        for server in servers:
            server.stop()
        pool.close()
    per_repeat = [ratios(r) for r in repeats]
    results = {"targets": TARGETS, "request_bytes": sizes, "median": median_of(repeats),
               "ratios": median_of(per_repeat), "ratios_per_repeat": per_repeat, "repeats": repeats}
    print_tables(config, results)
    finish(out, results)


# ----------------------------------------------------------------------------- reporting


def _met(ok: bool) -> str:
    return "[green]met[/]" if ok else "[red]missed[/]"


def print_tables(config: Config, results: dict) -> None:
    """Print the service-against-echo table with each target met or missed, and the aio floor table."""
    console = Console(width=max(Console().width, 200))
    m, r = results["median"], results["ratios"]
    table = Table(title=f"predictor {config.predictor}, thread-pool server ({config.max_workers} workers): "
                        f"service vs echo on the same stack (median of {config.repeats}; ratios within each run)")
    for column in ("RPC / load", "service p50 ms", "p99 ms", "calls/s", "server CPU µs/call",
                   "echo p50 ms", "echo p99 ms", "echo calls/s", "service/echo", "target"):
        table.add_column(column, justify="left" if column in ("RPC / load", "target") else "right")
    for name in UNARY:
        if name not in m:
            continue
        svc, echo = m[name]["service"], m[name]["echo"]
        single_ratio, cpu_ratio = r[f"{name} single p50"], r[f"{name} server cpu"]
        table.add_row(f"{name}, 1 sequential client", f"{svc['single']['p50_ms']:.3f}",
                      f"{svc['single']['p99_ms']:.3f}", f"{svc['single']['per_s']:,.0f}",
                      f"{svc['single']['server_cpu_us_per_call']:.0f}", f"{echo['single']['p50_ms']:.3f}",
                      f"{echo['single']['p99_ms']:.3f}", f"{echo['single']['per_s']:,.0f}",
                      f"{single_ratio:.2f} (p50), {cpu_ratio:.2f} (CPU)",
                      f"p50 ≤ {TARGETS['single_p50_ratio']}× {_met(single_ratio <= TARGETS['single_p50_ratio'])}, "
                      f"CPU ≤ {TARGETS['single_cpu_ratio']}× {_met(cpu_ratio <= TARGETS['single_cpu_ratio'])}")
        if "open" not in svc:
            continue
        o, eo = svc["open"], echo["open"]
        table.add_row(f"{name}, open loop {config.rate:,.0f}/s, {config.clients} clients",
                      f"{o['p50_ms']:.3f}", f"{o['p99_ms']:.3f} ({o['p99_corrected_ms']:.1f} CO)",
                      f"{o['per_s']:,.0f}", f"{o['server_cpu_us_per_call']:.0f}", f"{eo['p50_ms']:.3f}",
                      f"{eo['p99_ms']:.3f} ({eo['p99_corrected_ms']:.1f} CO)", f"{eo['per_s']:,.0f}",
                      f"{r[f'{name} open p99']:.2f} (p99)",
                      f"p99 ≤ {TARGETS['p99_ms']} ms {_met(o['p99_ms'] <= TARGETS['p99_ms'])}")
        c, ec = svc["closed"], echo["closed"]
        table.add_row(f"{name}, closed loop, {config.clients} clients", f"{c['p50_ms']:.3f}",
                      f"{c['p99_ms']:.3f}", f"{c['per_s']:,.0f}", f"{c['server_cpu_us_per_call']:.0f}",
                      f"{ec['p50_ms']:.3f}", f"{ec['p99_ms']:.3f}", f"{ec['per_s']:,.0f}",
                      f"{r[f'{name} closed throughput']:.2f} (calls/s)", "")
    rank = m.get("RankPlacements")
    if rank is not None:
        service, echo = rank["service"], rank["echo"]
        ok = service["evals_per_s"] >= TARGETS["rank_evals_per_s"]
        table.add_row(f"RankPlacements, {config.candidates} candidates", f"{service['p50_ms']:.2f}",
                      f"{service['p99_ms']:.2f}", f"{service['evals_per_s']:,.0f} evals",
                      f"{service['server_cpu_us_per_call'] / config.candidates:.1f} /eval",
                      f"{echo['p50_ms']:.2f}", f"{echo['p99_ms']:.2f}", f"{echo['evals_per_s']:,.0f} evals",
                      f"{r['RankPlacements throughput']:.2f} (evals/s)",
                      f"≥ {TARGETS['rank_evals_per_s']:,} evals/s {_met(ok)}")
    for stream in STREAMS:
        if stream not in m:
            continue
        ingest = m[stream]
        per = 1 if stream == "ReportObservations" else config.ingest_batch
        ok = ingest["service"]["records_per_s"] >= TARGETS["ingest_records_per_s"]
        table.add_row(f"{stream}, {per} record(s)/message", "", "",
                      f"{ingest['service']['records_per_s']:,.0f} rec",
                      f"{ingest['service']['server_cpu_us_per_record']:.1f} /rec", "", "",
                      f"{ingest['echo']['records_per_s']:,.0f} rec", f"{r[f'{stream} throughput']:.2f} (rec/s)",
                      f"≥ {TARGETS['ingest_records_per_s']:,} rec/s {_met(ok)}")
    console.print(table)
    if "aio floor" in m:
        floor = m["aio floor"]
        aio_table = Table(title="the stack floor: echo on grpc.aio vs echo on the thread pool (same run)")
        for column in ("server", "1 client p50 ms", "p99 ms", "server CPU µs/call",
                       f"{config.clients} clients calls/s", "stream msgs/s"):
            aio_table.add_column(column, justify="left" if column == "server" else "right")
        for label in ("thread", "aio"):
            f = floor[label]
            aio_table.add_row(label, f"{f['single']['p50_ms']:.3f}", f"{f['single']['p99_ms']:.3f}",
                              f"{f['single']['server_cpu_us_per_call']:.0f}", f"{f['closed']['per_s']:,.0f}",
                              f"{f['stream_messages_per_s']:,.0f}")
        aio_table.add_row("aio / thread", f"{r['aio/thread single p50']:.2f}", "", "",
                          f"{r['aio/thread closed throughput']:.2f}", f"{r['aio/thread stream']:.2f}")
        console.print(aio_table)
    if "curve" in m:
        print_curve(config, m["curve"], r)
    console.print("CO: p99 corrected for coordinated omission (from the scheduled send). "
                  f"Request sizes (bytes): {results['request_bytes']}")


def print_curve(config: Config, curve: dict, r: dict) -> None:
    """The candidate curve: server CPU per call and per candidate beside the echo's (medians), and
    the ratios taken within each run (medians)."""
    console = Console(width=max(Console().width, 200))
    predict = curve["PredictLatency"]
    table = Table(title="RankPlacements by size, one sequential client: server CPU per call and per candidate "
                        f"(median of {config.repeats}); PredictLatency: {predict['service']['server_cpu_us_per_call']:.0f} "
                        f"µs/call (echo {predict['echo']['server_cpu_us_per_call']:.0f})")
    for column in ("form", "candidates", "µs CPU/call", "µs CPU/candidate", "candidates/s", "echo µs CPU/call",
                   "CPU/echo", "time/echo", "CPU/PredictLatency", "marginal µs/candidate (from the size before)"):
        table.add_column(column, justify="left" if column == "form" else "right")
    sizes = sorted(config.curve)
    for form in CURVE_FORMS:
        for k, n in enumerate(sizes):
            svc, echo = curve[f"RankPlacements{form}_{n}"]["service"], curve[f"RankPlacements{form}_{n}"]["echo"]
            marginal = r.get(f"rank{form} marginal {sizes[k - 1]}-{n}") if k else None
            table.add_row("packed, omit_detail" if form else "classic", f"{n:,}", f"{svc['server_cpu_us_per_call']:.0f}",
                          f"{svc['server_cpu_us_per_candidate']:.2f}", f"{svc['candidates_per_s']:,.0f}",
                          f"{echo['server_cpu_us_per_call']:.0f}", f"{r[f'rank{form} {n} cpu/echo']:.2f}",
                          f"{r[f'rank{form} {n} time/echo']:.2f}", f"{r[f'rank{form} {n} cpu/predict']:.2f}",
                          "" if marginal is None else f"{marginal:.2f}")
        flat = r.get(f"rank{form} marginal max/min")
        if flat is not None:
            table.add_row("", "", "", "", "", "", "", "", "marginal max/min", f"{flat:.2f}")
    console.print(table)


if __name__ == "__main__":
    main()

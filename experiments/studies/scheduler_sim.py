"""Study 6: what the predictions are worth to a scheduler, in a discrete-event simulation.

A dispatcher places batches on ``devices`` simulated devices, each running up to
``slots`` batches at once, by asking the prediction service over a real gRPC
channel (the server runs in this process on a free port; every question is a
``RankPlacements`` call, every lesson a ``ReportObservations`` stream).

**The data.** For each of ``datasets`` (by default the embedded ``cpu-default``
and the collection with the most interference, ``cpu-load-high``), its records
(in stream order) are cut in two: the
first ``warm_fraction`` warm-starts every dispatcher's service (the ``static``
model is fitted on all of it offline, then frozen), the rest is the *replay
pool* that drives the simulation. Device signals are dropped from both, since
a simulated device has none to measure: every predictor learns and answers
from the batch and its co-runners only.

**Arrivals.** Batches arrive by a Poisson process at ``load x capacity`` per
second, where the nominal capacity is ``devices x slots / mean solo latency``
of the pool (so load 1.0 would fill every slot if nothing slowed down). Each
arrival is a record of the pool drawn uniformly: its model, batch size,
profiled attributes and solo latency. Its deadline is ``slo_factor x solo``,
counted from its arrival (it starts at once if placed). Every dispatcher sees
the same arrivals at a given load.

**Actual latency.** The latency a placed batch really takes is *replayed*: drawn
uniformly (seeded) from the pool's records of the same model and batch size
whose co-runners best match the batches running on the chosen device when it
starts, by the first level that has any record:

1. the same multiset of co-runner models (``resnet + bert``), whatever their
   overlap in the recording;
2. the same number of co-runners;
3. the nearest number of co-runners (ties: the larger);

(a record with no co-runners is the match for an idle device). The draw is made
once, at the start: batches that join later do not stretch it again (the
recorded latencies already include whatever joined during the recorded run).
How often each level served is reported.

**Dispatch.** On each arrival the dispatcher asks ``RankPlacements`` about every
device with a free slot, giving that device's running batches explicitly
(``co_runner_source = EXPLICIT``, an idle device with none), each with its
expected remaining time (the dispatcher's own prediction when it was placed,
minus the time it has run; past that, 10% of the prediction), from which the
service derives the expected overlap; the batch's solo latency is sent too. It
places the batch on the device with most slack, where slack is the deadline
minus the *upper bound* at ``confidence`` (decision ``bound``) or minus the
*predicted latency* (decision ``point``), among those with slack >= 0; ties
(the oblivious dispatcher sees the same slack everywhere) are broken uniformly
at random. If none qualifies, or every slot is busy, the batch is rejected
(there is no queue) — except that a share ``explore`` of the arrivals no device
qualifies for is placed anyway on the best-ranked free device (*exploration*: a
dispatcher that only places what its bound allows would stop teaching the
service about crowded devices, and its bounds would never narrow again); the
share explored is reported. Each ``RankPlacements`` call names the batch
(``batch_id``) and the learning dispatchers report its observation with the same
id, so the service calibrates on the answers it really gave.

**Dispatchers** (``label=predictor/decision[/learn]``):

* ``oblivious=solo/point``: interference ignored (the latency alone);
* ``static=static/point``: the coarse GPUlet-style model, fitted offline;
* ``static-bound=static/bound``: the same with the service's conformal bound,
  calibrated on the warm-start part only;
* ``online=rls/bound/learn``: RLS with calibrated bounds, which also learns
  online: every finished batch is reported (``ReportObservations``, batched
  between arrivals) with its replayed latency and its *simulated* co-runners
  and their measured overlap; its bounds are recalibrated from those too;
* ``online-point=rls/point/learn``: the same without the bound (ablation).

The learning services are warm-started afresh for every load.

**Reported** per dispatcher and load: deadline-miss rate among placed batches,
rejection rate (full or infeasible), goodput (batches that met their deadline
per simulated second), device utilisation (fraction of time a device runs
anything) and slot occupancy (mean running batches over ``slots``), and the
mean wall time of a ``RankPlacements`` call.

Run: ``.venv/bin/python -m experiments.studies.scheduler_sim``
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import random
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

from experiments.common import finish, plot_against_load, start
from experiments.datasets import load
from predictor.predictors import create
from predictor.records.logio import write_records
from predictor.records.record import CoRunner, Record
from predictor.rpc.client import InterferenceClient
from predictor.rpc.server import create_server, stop_server
from predictor.service import Service
from predictor.service.config import ServiceConfig
from predictor.service.types import Candidate, CoRunnerSource, PlannedCoRunner

DISPATCHERS = ("oblivious=solo/point", "static=static/point", "static-bound=static/bound",
               "online=rls/bound/learn", "online-point=rls/point/learn")
OVERRUN_FRACTION = 0.1


@dataclasses.dataclass(frozen=True)
class Config:
    """The study's settings; each field is also a ``--field`` option."""

    datasets: tuple[str, ...] = ("cpu-default", "cpu-load-high")
    data: str = ""  # folder holding igniter-v100/ and gpulet-ampere/ (empty: $INTERFERENCE_DATA)
    warm_fraction: float = 0.5
    devices: int = 4
    slots: int = 2
    loads: tuple[float, ...] = (0.3, 0.6, 1.0, 1.4)
    arrivals: int = 2000
    slo_factor: float = 2.0
    confidence: float = 0.9
    explore: float = 0.02  # share of infeasible arrivals placed anyway (on the best-ranked device)
    dispatchers: tuple[str, ...] = DISPATCHERS
    seed: int = 0


@dataclasses.dataclass(frozen=True)
class Dispatcher:
    """A dispatcher: the service's predictor, how it decides (``point`` or ``bound``), whether it learns."""

    label: str
    predictor: str
    decision: str  # "point" or "bound"
    learn: bool

    @classmethod
    def parse(cls, text: str) -> Dispatcher:
        """Parse ``label=predictor/point|bound[/learn]``; ``ValueError`` otherwise."""
        label, sep, rest = text.partition("=")
        parts = rest.split("/") if sep else []
        if len(parts) < 2 or parts[1] not in ("point", "bound") or any(p != "learn" for p in parts[2:]):
            raise ValueError(f"dispatcher: expected label=predictor/point|bound[/learn], got {text!r}")
        return cls(label, parts[0], parts[1], "learn" in parts[2:])


# ----------------------------------------------------------------------------- replayed latencies
def co_models(record: Record) -> tuple[str, ...]:
    """The sorted models of ``record``'s co-runners (a multiset key)."""
    return tuple(sorted(c.model for c in record.co_runners))


class LatencyPool:
    """Recorded latencies by (model, batch size) and co-runner models, drawn as documented above."""

    def __init__(self, records: list[Record]):
        self.by_set: dict[tuple, list[float]] = defaultdict(list)
        self.by_count: dict[tuple, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
        for r in records:
            key = (r.batch.model, r.batch.batch_size)
            self.by_set[(*key, co_models(r))].append(float(r.latency_ms))
            self.by_count[key][len(r.co_runners)].append(float(r.latency_ms))
        self.levels: Counter = Counter()

    def draw(self, model: str, batch_size: int, running: tuple[str, ...], rng: random.Random) -> float:
        """A recorded latency of ``model`` at ``batch_size`` beside the ``running`` models.

        The matching level used is counted in :attr:`levels`.
        """
        exact = self.by_set.get((model, batch_size, tuple(sorted(running))))
        if exact:
            self.levels["same co-runner models"] += 1
            return rng.choice(exact)
        counts = self.by_count[(model, batch_size)]
        n = len(running)
        if counts.get(n):
            self.levels["same number of co-runners"] += 1
            return rng.choice(counts[n])
        nearest = min(counts, key=lambda k: (abs(k - n), -k))
        self.levels["nearest number of co-runners"] += 1
        return rng.choice(counts[nearest])


# ----------------------------------------------------------------------------- the simulation
@dataclasses.dataclass
class Running:
    """A placed batch: its arrival index, the record it replays, its simulated span, its predicted latency."""

    ident: int
    template: Record
    start_ms: float
    end_ms: float
    predicted_ms: float


def without_signals(record: Record) -> Record:
    """``record`` with its device signals dropped."""
    return dataclasses.replace(record, signals={})


def start_service(dispatcher: Dispatcher, config: Config, warm: list[Record], warm_path: Path):
    """An in-process server for ``dispatcher``, warm-started; returns (server, service, client)."""
    predictor = create(dispatcher.predictor, seed=config.seed)
    if predictor.name == "static":
        predictor.fit(warm)  # offline, on the whole warm-start part; frozen from then on
    service = Service(ServiceConfig(predictor=dispatcher.predictor, default_confidence=config.confidence,
                                    snapshot_every_s=0, observation_log=False), predictor=predictor)
    server, port = create_server("127.0.0.1:0", service)
    server.start()
    service.open(warm_start=warm_path)
    client = InterferenceClient(f"127.0.0.1:{port}", timeout=30)
    client.wait_ready(30)
    return server, service, client


def observed(batch: Running, device: str, kind: str, history: list[Running]) -> Record:
    """The record of a finished batch, with its simulated co-runners and their overlap."""
    span = batch.end_ms - batch.start_ms
    runners = []
    for other in history:
        if other.ident == batch.ident:
            continue
        shared = min(other.end_ms, batch.end_ms) - max(other.start_ms, batch.start_ms)
        if shared > 0:
            t = other.template.batch
            runners.append(CoRunner(t.model, t.batch_size, t.attrs, overlap=min(1.0, shared / span)))
    t = batch.template
    return Record(device=device, batch=t.batch, latency_ms=span, device_kind=kind,
                  start_s=batch.start_ms / 1000.0, solo_latency_ms=t.solo_latency_ms,
                  co_runners=tuple(runners), source="sim")


def simulate(dispatcher: Dispatcher, client: InterferenceClient, arrivals: list[tuple[float, Record]],
             pool: LatencyPool, config: Config, kind: str, seed: int) -> dict:
    """One run: place every arrival, replay latencies, report what happened."""
    rng = random.Random(seed)
    ties = random.Random(seed + 1)
    explore_rng = random.Random(seed + 2)
    names = [f"sim{d}" for d in range(config.devices)]
    running: list[list[Running]] = [[] for _ in names]
    history: list[list[Running]] = [[] for _ in names]  # recent batches per device, for overlaps
    ends: list[tuple[float, int, int]] = []  # (end_ms, ident, device)
    busy_ms = [0.0] * config.devices  # time with at least one batch running
    slot_ms = 0.0
    placed = met = full = infeasible = explored = 0
    pending: list[tuple[Record, str]] = []
    rpc_s: list[float] = []
    report_s = 0.0
    last_change = [0.0] * config.devices

    def finish_until(now: float) -> None:
        nonlocal slot_ms
        while ends and ends[0][0] <= now:
            end_ms, ident, d = heapq.heappop(ends)
            busy_ms[d] += end_ms - last_change[d]  # the device ran something until now
            last_change[d] = end_ms
            batch = next(b for b in running[d] if b.ident == ident)
            running[d].remove(batch)
            if dispatcher.learn:
                pending.append((observed(batch, names[d], kind, history[d]), f"b{ident}"))
            # keep only batches that may still overlap a running or future one
            horizon = min([b.start_ms for b in running[d]] + [end_ms])
            history[d] = [b for b in history[d] if b.end_ms > horizon]

    for ident, (t_ms, template) in enumerate(arrivals):
        finish_until(t_ms)
        if pending:
            t0 = time.perf_counter()
            client.report_observations(pending)
            report_s += time.perf_counter() - t0
            pending = []
        spec = template.batch
        solo = float(template.solo_latency_ms)
        deadline = config.slo_factor * solo
        free = [d for d in range(config.devices) if len(running[d]) < config.slots]
        if not free:
            full += 1
            continue
        candidates = []
        for d in free:
            runners = tuple(
                PlannedCoRunner(b.template.batch.model, b.template.batch.batch_size, b.template.batch.attrs,
                                remaining_ms=max(b.start_ms + b.predicted_ms - t_ms,
                                                 OVERRUN_FRACTION * b.predicted_ms))
                for b in running[d]
            )
            candidates.append(Candidate(names[d], kind, runners, CoRunnerSource.EXPLICIT))
        t0 = time.perf_counter()
        ranking = client.rank_placements(spec, candidates, deadline_ms=deadline, confidence=config.confidence,
                                         solo_latency_ms=solo, batch_id=f"b{ident}")
        rpc_s.append(time.perf_counter() - t0)
        feasible = []
        for answer in ranking.placements:
            p = answer.prediction
            slack = deadline - (p.upper_bound_ms if dispatcher.decision == "bound" else p.latency_ms)
            if slack >= 0:
                feasible.append((slack, free[answer.candidate_index], p.latency_ms))
        if not feasible:
            if not (config.explore and explore_rng.random() < config.explore):
                infeasible += 1
                continue
            explored += 1  # placed anyway, on the best-ranked free device
            best = ranking.placements[0]
            feasible = [(0.0, free[best.candidate_index], best.prediction.latency_ms)]
        most = max(f[0] for f in feasible)
        _, d, best_pred = ties.choice([f for f in feasible if f[0] >= most - 1e-9 * max(1.0, abs(most))])
        actual = pool.draw(spec.model, spec.batch_size, tuple(b.template.batch.model for b in running[d]), rng)
        if running[d]:
            busy_ms[d] += t_ms - last_change[d]
        last_change[d] = t_ms
        batch = Running(ident, template, t_ms, t_ms + actual, best_pred)
        running[d].append(batch)
        history[d].append(batch)
        heapq.heappush(ends, (batch.end_ms, ident, d))
        placed += 1
        slot_ms += actual
        met += actual <= deadline
    horizon_ms = arrivals[-1][0]
    finish_until(math.inf)
    horizon_ms = max(horizon_ms, max(last_change))
    n = len(arrivals)
    return {
        "arrivals": n,
        "placed": placed,
        "rejected_full": full,
        "rejected_infeasible": infeasible,
        "rejection_rate": (full + infeasible) / n,
        "explored": explored,
        "exploration_share": explored / n,
        "miss_rate": (placed - met) / placed if placed else float("nan"),
        "met": met,
        "goodput_per_s": met / (horizon_ms / 1000.0),
        "utilisation": float(np.mean(busy_ms)) / horizon_ms,
        "slot_occupancy": slot_ms / (horizon_ms * config.devices * config.slots),
        "rank_rpc_ms": 1000.0 * float(np.mean(rpc_s)) if rpc_s else float("nan"),
        "report_s": report_s,
        "simulated_s": horizon_ms / 1000.0,
    }


def poisson_arrivals(pool: list[Record], rate_per_s: float, n: int, seed: int) -> list[tuple[float, Record]]:
    """``n`` Poisson arrivals at ``rate_per_s``: (time in ms, a record of ``pool`` drawn uniformly)."""
    rng = random.Random(seed)
    t, out = 0.0, []
    for _ in range(n):
        t += rng.expovariate(rate_per_s) * 1000.0
        out.append((t, rng.choice(pool)))
    return out


# ----------------------------------------------------------------------------- report
def markdown(results: dict) -> str:
    """One table row per load and dispatcher."""
    lines = ["| load | rate (/s) | dispatcher | miss rate (placed) | rejected | explored | goodput (/s) | "
             "utilisation | slot occupancy | placed |",
             "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for load_key, run in results["loads"].items():
        for label, r in run["dispatchers"].items():
            lines.append(f"| {load_key} | {run['rate_per_s']:.1f} | {label} | {r['miss_rate']:.1%} | "
                         f"{r['rejection_rate']:.1%} | {r.get('exploration_share', 0.0):.1%} | "
                         f"{r['goodput_per_s']:.1f} | {r['utilisation']:.1%} | "
                         f"{r['slot_occupancy']:.1%} | {r['placed']} |")
    return "\n".join(lines)


def plot(results: dict, path: Path, title: str) -> None:
    """Miss rate, rejection rate, goodput and utilisation against offered load, a line per dispatcher."""
    metrics = (("miss_rate", "deadline-miss rate (placed)", 100), ("rejection_rate", "rejection rate", 100),
               ("goodput_per_s", "goodput (met deadlines / s)", 1), ("utilisation", "device utilisation", 100))
    plot_against_load(results, "dispatchers", metrics, path, title, xlabel="offered load (x nominal capacity)",
                      figsize=(14, 3.4), legend_size=8, percent_ylabel=True)


def run(config: Config, records: list[Record]) -> dict:
    """The study on one dataset's ``records`` (in stream order): warm start, then every load and dispatcher."""
    dispatchers = [Dispatcher.parse(text) for text in config.dispatchers]
    records = [without_signals(r) for r in records if r.solo_latency_ms and r.latency_ms]
    cut = int(len(records) * config.warm_fraction)
    warm, replay = records[:cut], records[cut:]
    if not warm or not replay:
        raise ValueError("too few records to warm-start and replay")
    kind = replay[0].device_kind
    pool = LatencyPool(replay)
    mean_solo_ms = float(np.mean([r.solo_latency_ms for r in replay]))
    capacity = config.devices * config.slots / (mean_solo_ms / 1000.0)
    results: dict = {"warm_records": len(warm), "replay_records": len(replay),
                     "mean_solo_ms": mean_solo_ms, "nominal_capacity_per_s": capacity, "loads": {}}
    with tempfile.TemporaryDirectory() as tmp:
        warm_path = Path(tmp) / "warm.jsonl"
        write_records(warm_path, warm)
        services = {}
        try:
            for dispatcher in dispatchers:
                t0 = time.perf_counter()
                services[dispatcher.label] = start_service(dispatcher, config, warm, warm_path)
                print(f"{dispatcher.label}: service warm-started in {time.perf_counter() - t0:.1f} s")
            for i, load_factor in enumerate(config.loads):
                rate = load_factor * capacity
                arrivals = poisson_arrivals(replay, rate, config.arrivals, config.seed + 1000 * i)
                run_: dict = {"rate_per_s": rate, "dispatchers": {}}
                for dispatcher in dispatchers:
                    if dispatcher.learn and i > 0:  # every load starts from the warm-started state
                        server, service, client = services.pop(dispatcher.label)
                        client.close()
                        stop_server(server, service, grace=0.5)
                        services[dispatcher.label] = start_service(dispatcher, config, warm, warm_path)
                    _, _, client = services[dispatcher.label]
                    t0 = time.perf_counter()
                    pool.levels.clear()
                    r = simulate(dispatcher, client, arrivals, pool, config, kind, config.seed + 1000 * i)
                    r["latency_match"] = dict(pool.levels)
                    r["wall_s"] = time.perf_counter() - t0
                    run_["dispatchers"][dispatcher.label] = r
                    print(f"load {load_factor:g} ({rate:.1f}/s) {dispatcher.label}: miss {r['miss_rate']:.1%}, "
                          f"rejected {r['rejection_rate']:.1%}, explored {r['exploration_share']:.1%}, "
                          f"goodput {r['goodput_per_s']:.1f}/s, "
                          f"utilisation {r['utilisation']:.1%} ({r['wall_s']:.1f} s)")
                results["loads"][f"{load_factor:g}"] = run_
        finally:
            for server, service, client in services.values():
                client.close()
                stop_server(server, service, grace=0.5)
    return results


def main() -> None:
    """Simulate every dataset; print, plot, write ``results.md`` and ``results.json``."""
    config, out = start("scheduler_sim", Config(), __doc__.splitlines()[0])
    results: dict = {"datasets": {}}
    text = [f"# Scheduler simulation: {config.devices} devices x {config.slots} slots, deadline = "
            f"{config.slo_factor:g} x solo latency, confidence {config.confidence:g}", ""]
    for name, records in load(list(config.datasets), config.data).items():
        r = results["datasets"][name] = run(config, records)
        text += [f"## {name}", "",
                 f"Nominal capacity {r['nominal_capacity_per_s']:.0f} batches/s (mean solo {r['mean_solo_ms']:.1f} ms); "
                 f"{config.arrivals} arrivals per run; warm start on {r['warm_records']} records, replay pool "
                 f"{r['replay_records']}.", "", markdown(r), ""]
        plot(r, out / f"scheduler-{name}.png", f"{name}: {config.devices} devices x {config.slots} slots, "
             f"deadline {config.slo_factor:g} x solo, confidence {config.confidence:g}")
    print("\n".join(text))
    (out / "results.md").write_text("\n".join(text) + "\n")
    finish(out, results)


if __name__ == "__main__":
    main()

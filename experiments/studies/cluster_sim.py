"""Study: a simulated cluster whose scheduler asks the running prediction service (simpy).

**The cluster.** ``devices`` devices (default 16) on a two-level topology
(``devices_per_host`` per host, ``hosts_per_rack`` hosts per rack). Each runs up to
``slots`` batches at once (co-location) and serves a FIFO queue: the head starts when a
slot is free *and* its memory fits. Each device has ``memory_mb`` of memory: a running
batch pins its model's weights and its activations (per item); models stay loaded while
there is room (idle ones are evicted least recently used first), and a batch whose model is
not loaded first spends the model's load time (weights / ``load_mb_per_ms``) on its slot.
The models' weights and activations are a fixed table (``MODEL_MEMORY``), scaled by size.

**Arrivals and latencies.** Batches arrive by a Poisson process at ``load x capacity``;
the nominal capacity is ``devices x slots / (mean solo latency x slowdown at full
co-location)`` of the replay pool (so load 1.0 keeps every slot busy). Each arrival is a
record of the pool drawn uniformly (model, batch size, attributes, solo latency); its input
lives on a host drawn uniformly and is ``input_mb`` large: a device on another host first
receives it (``host_gbps`` within a rack, ``rack_gbps`` across racks). Its deadline is
``slo_factor x solo`` from its arrival. The latency a batch really takes is replayed from
a recorded co-location log (the embedded CPU dataset ``cpu-default``, or a third-party
one under ``$INTERFERENCE_DATA``): a recorded latency of the same model and batch size
beside the same co-runner models, else the same number of them, else the nearest number
(:class:`experiments.studies.scheduler_sim.LatencyPool`). The first ``warm_fraction`` of the log
warm-starts the services; the rest is the replay pool.

**Policies** (each asks its own running gRPC service, on the simulated clock):

* ``blind``: interference-blind least-loaded: the device with fewest batches running and
  queued (no question asked);
* ``static``: the paper's static predictor (fitted offline on the warm part, frozen),
  ``RankPlacements`` over every device with its running batches as explicit co-runners
  (remaining times from the predictions), the most slack wins;
* ``ours``: the online RLS predictor with calibrated bounds, learning from every finished
  batch (``ReportObservations``), the same question: no queue, memory or network term;
* ``ours+queue``: and the devices' queues reported (``ReportBatchQueued``, ``Start``,
  ``End``): the answers add the wait;
* ``ours+queue+memory``: and memory (capacity and use, peak memory, load time, models
  loaded) on the start and end reports: devices short of memory are infeasible, the load
  time is added where the model is not loaded;
* ``ours+queue+memory+network``: and the network: the service is given the cluster's
  topology (:func:`topology_of`), each query says where its input is and how large
  (``RankPlacements`` with ``input_host``/``input_bytes``: the answers add the transfer),
  and each start report the measured transfer (the link classes' corrections learn it);
* ``ours+queue+memory+network+delay``: and delay scheduling as the ranking answers it
  (``RankPlacementsResponse.delay``): ``local_now`` and ``remote_now`` place the batch on the
  device named, ``wait_local`` queues it on the local device for at most ``T`` ms
  (``delay_limit_ms``), after which a batch that has not started moves to the remote device
  named; where the named device would miss the deadline, the most slack wins as before;
* ``oracle``: the anchor: no service, but each batch's true latency beside any co-runners is known
  (a batch's replayed latency is a function of the batch and its co-runners at its start), so the
  policy plays each device's queue forward (running batches' true ends, FIFO starts, memory, loads
  and transfers) and knows exactly when the batch would end there; the most slack wins, as for the
  service's policies. It isolates what the predictions cost from what the placement rule costs.

Every policy pays the transfer; only the last two are told about it.

**Reported** per policy and load: SLO attainment (batches finished within their deadline
over all arrivals), goodput (those per simulated second), both also as a ratio of the
oracle's at the same load when the oracle is run, p99 latency (arrival to end),
device utilisation (fraction of time running anything), the mean ``RankPlacements`` wall
time, and a plot of the first three and utilisation against load.

Run: ``.venv/bin/python -m experiments.studies.cluster_sim`` (``--quick true`` for a short run:
8 devices, 2 loads, 400 arrivals).
"""

from __future__ import annotations

import dataclasses
import math
import random
import tempfile
import time
import zlib
from collections import OrderedDict
from pathlib import Path

import numpy as np
import simpy

from experiments.common import finish, plot_against_load, start
from experiments.datasets import load
from experiments.studies.scheduler_sim import LatencyPool, observed, poisson_arrivals, without_signals
from predictor.predictors import create
from predictor.records.logio import write_records
from predictor.records.record import Record
from predictor.rpc.client import InterferenceClient
from predictor.rpc.server import create_server, stop_server
from predictor.service import Service
from predictor.service.config import ServiceConfig
from predictor.service.live.topology import Link, Topology
from predictor.service.types import Candidate, CoRunnerSource, InputPlace, PlannedCoRunner

POLICIES = ("blind", "static", "ours", "ours+queue", "ours+queue+memory", "ours+queue+memory+network",
            "ours+queue+memory+network+delay", "oracle")
MODEL_MEMORY = {  # model: (weights MB, activations MB per item)
    "mlp": (300.0, 10.0), "mobilenet": (600.0, 40.0), "resnet": (1200.0, 80.0),
    "bert": (1800.0, 120.0), "vgg": (2500.0, 200.0), "gpt2": (3500.0, 250.0),
}
OVERRUN_FRACTION = 0.1


@dataclasses.dataclass(frozen=True)
class Config:
    """The study's settings; each field is also a ``--field`` option."""

    dataset: str = "cpu-default"
    data: str = ""
    devices: int = 16
    devices_per_host: int = 4
    hosts_per_rack: int = 2
    slots: int = 4
    memory_mb: float = 8000.0
    load_mb_per_ms: float = 200.0
    input_mb: float = 2.0
    host_gbps: float = 25.0
    rack_gbps: float = 10.0
    loads: tuple[float, ...] = (0.3, 0.5, 0.7, 0.8, 0.9, 0.95)
    arrivals: int = 2000
    slo_factor: float = 5.0
    confidence: float = 0.95
    warm_fraction: float = 0.5
    policies: tuple[str, ...] = POLICIES
    seed: int = 0
    quick: bool = False

    def effective(self) -> Config:
        """The configuration actually run (``quick``: 8 devices, loads 0.5 and 0.8, 400 arrivals)."""
        if not self.quick:
            return self
        return dataclasses.replace(self, devices=8, loads=(0.5, 0.8), arrivals=400)


def model_memory(model: str) -> tuple[float, float]:
    """(weights MB, activations MB per item) of ``model`` (unknown models: a stable draw from the table)."""
    if model in MODEL_MEMORY:
        return MODEL_MEMORY[model]
    table = list(MODEL_MEMORY.values())
    return table[zlib.crc32(model.encode()) % len(table)]


def footprint_mb(model: str, batch_size: int) -> float:
    """Peak memory of a batch: weights and activations."""
    weights, per_item = model_memory(model)
    return weights + per_item * batch_size


# ----------------------------------------------------------------------------- one device
@dataclasses.dataclass
class _Span:
    """A batch's execution span, as :func:`experiments.studies.scheduler_sim.observed` reads it."""

    ident: int
    template: Record
    start_ms: float
    end_ms: float


@dataclasses.dataclass
class Job:
    """One arrival as it goes through the cluster."""

    ident: int
    template: Record
    arrival_ms: float
    deadline_ms: float  # relative to the arrival
    input_host: int
    device: int = -1
    predicted_ms: float = 0.0
    actual_ms: float = math.nan  # the replayed latency, once started
    start_ms: float = math.nan  # execution start (after transfer and load)
    end_ms: float = math.nan
    queued: bool = False

    @property
    def model(self) -> str:
        """The batch's model."""
        return self.template.batch.model

    @property
    def activations_mb(self) -> float:
        """Memory the batch pins beyond its model's weights."""
        return model_memory(self.model)[1] * self.template.batch.batch_size


class Device:
    """A simulated device: slots, FIFO queue, memory with loaded models (LRU)."""

    def __init__(self, index: int, config: Config):
        self.index = index
        self.name = f"dev{index}"
        self.host = index // config.devices_per_host
        self.rack = self.host // config.hosts_per_rack
        self.config = config
        self.running: list[Job] = []
        self.queue: list[Job] = []
        self.loaded: OrderedDict[str, float] = OrderedDict()  # model -> weights MB, least recent first
        self.busy_ms = 0.0
        self.last_change = 0.0
        self.history: list = []  # recent finished or running batches, for observed overlaps

    def pinned_mb(self) -> float:
        """Memory held by running batches: their models' weights and their activations."""
        models = {j.model for j in self.running}
        return sum(model_memory(m)[0] for m in models) + sum(j.activations_mb for j in self.running)

    def can_start(self, job: Job) -> bool:
        """Whether ``job`` may start now: a free slot and room for it beside what is pinned."""
        if len(self.running) >= self.config.slots:
            return False
        extra = job.activations_mb + (0.0 if any(j.model == job.model for j in self.running)
                                      else model_memory(job.model)[0])
        return self.pinned_mb() + extra <= self.config.memory_mb

    def load(self, model: str) -> float:
        """Make ``model`` loaded (evicting idle models least recently used first); returns the load time, ms."""
        if model in self.loaded:
            self.loaded.move_to_end(model)
            return 0.0
        weights = model_memory(model)[0]
        busy = {j.model for j in self.running}
        while sum(self.loaded.values()) + weights + sum(j.activations_mb for j in self.running) > self.config.memory_mb:
            victim = next((m for m in self.loaded if m not in busy), None)
            if victim is None:
                break
            del self.loaded[victim]
        self.loaded[model] = weights
        return weights / self.config.load_mb_per_ms

    def mark(self, now: float) -> None:
        """Account busy time up to ``now`` (call before the running set changes)."""
        if self.running:
            self.busy_ms += now - self.last_change
        self.last_change = now


# ----------------------------------------------------------------------------- the simulation
class Cluster:
    """The simpy simulation of one policy at one load."""

    def __init__(self, config: Config, policy: str, client: InterferenceClient | None, pool: LatencyPool,
                 kind: str, seed: int):
        self.config = config
        self.policy = policy
        self.client = client
        self.pool = pool
        self.kind = kind
        self.env = simpy.Environment()
        self.devices = [Device(i, config) for i in range(config.devices)]
        self.seed = seed
        self.rng = random.Random(seed)
        self.ties = random.Random(seed + 1)
        self.done: list[Job] = []
        self.pending: list[Record] = []
        self.rank_s: list[float] = []
        self.learn = policy.startswith("ours")
        self.queues = "queue" in policy
        self.memory = "memory" in policy
        self.network = "network" in policy
        self.delay = "delay" in policy
        self.moves: list[tuple[Job, int, float]] = []  # wait_local: (job, remote device, delay limit ms)
        self.moved = 0

    # ---------------------------------------------------------------- clock for the service
    def now_s(self) -> float:
        """The simulated clock in seconds (the service's clock)."""
        return self.env.now / 1000.0

    # ---------------------------------------------------------------- transfer
    def transfer_ms(self, job: Job, device: Device) -> float:
        """Time to move the job's input to ``device``."""
        if job.input_host == device.host:
            return 0.0
        same_rack = job.input_host // self.config.hosts_per_rack == device.rack
        gbps = self.config.host_gbps if same_rack else self.config.rack_gbps
        return self.config.input_mb * 8.0 / gbps  # MB * 8 / Gbit/s = ms

    def input_of(self, job: Job) -> InputPlace:
        """Where the job's input is and how large, as the service is told."""
        return InputPlace(host=f"h{job.input_host}", n_bytes=self.config.input_mb * 1e6)

    # ---------------------------------------------------------------- placement
    def choose(self, job: Job, delay: bool = True) -> int:
        """The device the policy places ``job`` on (``delay``: follow the ranking's delay decision, with the
        ``delay`` policy)."""
        if self.policy == "blind":
            loads = [len(d.running) + len(d.queue) for d in self.devices]
            least = min(loads)
            return self.ties.choice([i for i, n in enumerate(loads) if n == least])
        if self.policy == "oracle":
            return self.choose_knowing(job)
        assert self.client is not None
        now = self.env.now
        candidates = []
        for device in self.devices:
            runners = tuple(
                PlannedCoRunner(j.template.batch.model, j.template.batch.batch_size, j.template.batch.attrs,
                                remaining_ms=max(j.start_ms + j.predicted_ms - now, OVERRUN_FRACTION * j.predicted_ms)
                                if not math.isnan(j.start_ms) else j.predicted_ms)
                for j in device.running
            )
            candidates.append(Candidate(device.name, self.kind, runners, CoRunnerSource.EXPLICIT))
        t0 = time.perf_counter()
        ranking = self.client.rank_placements(job.template.batch, candidates, deadline_ms=job.deadline_ms,
                                              confidence=self.config.confidence,
                                              solo_latency_ms=job.template.solo_latency_ms,
                                              where=self.input_of(job) if self.network else None)
        self.rank_s.append(time.perf_counter() - t0)
        best = ranking.placements[0]
        ties = [p for p in ranking.placements
                if p.slack_ms >= best.slack_ms - 1e-9 * max(1.0, abs(best.slack_ms))
                and p.infeasible_reason == best.infeasible_reason]
        chosen = self.ties.choice(ties) if math.isfinite(best.slack_ms) else best
        decision = ranking.delay
        if self.delay and delay and decision is not None:
            by_device = {p.device: p for p in ranking.placements}
            named = by_device.get(decision.remote_device if decision.choice == "remote_now" else decision.local_device)
            if named is not None and named.feasible:
                chosen = named
                remote = by_device.get(decision.remote_device)
                if decision.choice == "wait_local" and remote is not None:
                    self.moves.append((job, remote.candidate_index, decision.delay_limit_ms))
        job.predicted_ms = chosen.prediction.latency_ms
        return chosen.candidate_index

    def choose_knowing(self, job: Job) -> int:
        """The oracle's placement: the device where ``job`` would end with the most slack, known exactly."""
        slack = [job.arrival_ms + job.deadline_ms - self.forecast_end_ms(job, d) for d in self.devices]
        best = max(slack)
        chosen = self.ties.choice([i for i, s in enumerate(slack) if s >= best - 1e-9 * max(1.0, abs(best))])
        job.predicted_ms = job.deadline_ms - slack[chosen] - (self.env.now - job.arrival_ms)
        return chosen

    def forecast_end_ms(self, job: Job, device: Device) -> float:
        """When ``job`` would end if queued on ``device`` now: the device played forward with true latencies."""
        clone = Device(device.index, self.config)
        clone.loaded = OrderedDict(device.loaded)
        clone.running = list(device.running)
        ends = {j.ident: j.start_ms + j.actual_ms for j in device.running}
        queue = [*device.queue, job]
        t = self.env.now
        while True:
            while queue and clone.can_start(queue[0]):
                head = queue.pop(0)
                load_ms = clone.load(head.model)
                actual = self.actual_latency_ms(head, tuple(j.model for j in clone.running))
                end = t + self.transfer_ms(head, device) + load_ms + actual
                if head is job:
                    return end
                clone.running.append(head)
                ends[head.ident] = end
            if not clone.running:
                return math.inf  # the head can never start here
            t = min(ends[j.ident] for j in clone.running)
            clone.running = [j for j in clone.running if ends[j.ident] > t]

    def actual_latency_ms(self, job: Job, running_models: tuple[str, ...]) -> float:
        """The latency ``job`` really takes beside ``running_models``: a recorded one, drawn by a generator keyed
        by the seed, the batch and its co-runners' models (so the same placement always replays the same)."""
        key = f"{self.seed}:{job.ident}:{','.join(sorted(running_models))}"
        return self.pool.draw(job.model, job.template.batch.batch_size, running_models, random.Random(key))

    def arrive(self, job: Job) -> None:
        """Place a job and enqueue it on its device."""
        self.flush()
        d = self.choose(job)
        job.device = d
        device = self.devices[d]
        device.queue.append(job)
        if self.queues and (device.queue[0] is not job or not device.can_start(job)):
            job.queued = True
            self.client.batch_queued(device.name, str(job.ident), job.template.batch, device_kind=self.kind)
        self.try_start(device)
        for waiting, remote, limit in self.moves:
            if math.isnan(waiting.start_ms):
                self.env.process(self.give_up_after(waiting, remote, limit))
        self.moves = []

    def give_up_after(self, job: Job, remote: int, limit_ms: float):
        """Delay scheduling: a batch still queued on its local device after ``limit_ms`` is placed again, as
        the service ranks the devices now (the remote device named at its arrival is only the fallback
        of an answer that is ``limit_ms`` old); it stays where it is when its own device still ranks first."""
        yield self.env.timeout(max(limit_ms, 0.0))
        local = self.devices[job.device]
        if job not in local.queue:
            return  # it started
        at = local.queue.index(job)
        local.queue.remove(job)
        self.client.batch_end(local.name, str(job.ident))  # dropped from the local queue
        remote = self.choose(job, delay=False)
        if remote == job.device:
            local.queue.insert(at, job)
            self.client.batch_queued(local.name, str(job.ident), job.template.batch, device_kind=self.kind)
            self.try_start(local)
            return
        self.moved += 1
        job.device = remote
        device = self.devices[remote]
        device.queue.append(job)
        if device.queue[0] is not job or not device.can_start(job):
            self.client.batch_queued(device.name, str(job.ident), job.template.batch, device_kind=self.kind)
        self.try_start(device)
        self.try_start(local)

    def try_start(self, device: Device) -> None:
        """Start the queue's head batches while they may start (FIFO: a blocked head blocks the rest)."""
        while device.queue and device.can_start(device.queue[0]):
            job = device.queue.pop(0)
            now = self.env.now
            device.mark(now)
            load_ms = device.load(job.model)
            transfer = self.transfer_ms(job, device)
            running_models = tuple(j.model for j in device.running)
            used_before = device.pinned_mb()
            device.running.append(job)
            actual = self.actual_latency_ms(job, running_models)
            job.actual_ms = actual
            job.start_ms = now + transfer + load_ms
            span = _Span(job.ident, job.template, job.start_ms, job.start_ms + actual)
            device.history.append(span)
            if not self.queues:
                pass  # the policy reports no queue (nor memory)
            elif self.memory:
                moved = {"where": self.input_of(job), "transfer_ms": transfer} if self.network and transfer > 0 else {}
                self.client.batch_start(device.name, str(job.ident), job.template.batch, device_kind=self.kind,
                                        memory_total_mb=self.config.memory_mb, memory_used_mb=used_before,
                                        load_ms=load_ms if load_ms > 0 else None,
                                        resident_models=list(device.loaded), **moved)
            else:
                self.client.batch_start(device.name, str(job.ident), job.template.batch, device_kind=self.kind)
            self.env.process(self.execute(device, job, span, transfer + load_ms + actual))

    def execute(self, device: Device, job: Job, span: _Span, duration_ms: float):
        """A running batch: it ends after its transfer, load and replayed latency."""
        yield self.env.timeout(duration_ms)
        now = self.env.now
        device.mark(now)
        device.running.remove(job)
        job.end_ms = now
        self.done.append(job)
        if self.learn:
            self.pending.append(observed(span, device.name, self.kind, device.history))
        horizon = min([j.start_ms for j in device.running] + [now])
        device.history = [b for b in device.history if b.end_ms > horizon]
        if self.queues:
            if self.memory:
                self.client.batch_end(device.name, str(job.ident),
                                      peak_memory_mb=footprint_mb(job.model, job.template.batch.batch_size),
                                      memory_used_mb=device.pinned_mb(), resident_models=list(device.loaded))
            else:
                self.client.batch_end(device.name, str(job.ident))
        self.try_start(device)

    def flush(self) -> None:
        """Report the finished batches' observations (learning policies)."""
        if self.pending and self.client is not None:
            self.client.report_observations(self.pending)
            self.pending = []

    def source(self, arrivals: list[tuple[float, Record]]):
        """The arrival process."""
        for ident, (t_ms, template) in enumerate(arrivals):
            yield self.env.timeout(max(t_ms - self.env.now, 0.0))
            job = Job(ident, template, t_ms, self.config.slo_factor * float(template.solo_latency_ms),
                      self.rng.randrange(max(1, self.config.devices // self.config.devices_per_host)))
            self.arrive(job)

    def run(self, arrivals: list[tuple[float, Record]]) -> dict:
        """Simulate every arrival to its end; the policy's figures."""
        self.env.process(self.source(arrivals))
        self.env.run()
        horizon = max(j.end_ms for j in self.done)
        latencies = np.array([j.end_ms - j.arrival_ms for j in self.done])
        met = sum(j.end_ms - j.arrival_ms <= j.deadline_ms for j in self.done)
        for device in self.devices:
            device.mark(horizon)
        n = len(arrivals)
        return {
            "arrivals": n,
            "finished": len(self.done),
            "slo_attainment": met / n,
            "goodput_per_s": met / (horizon / 1000.0),
            "p99_ms": float(np.percentile(latencies, 99)),
            "mean_ms": float(latencies.mean()),
            "utilisation": float(np.mean([d.busy_ms for d in self.devices])) / horizon,
            "queued_share": sum(j.queued for j in self.done) / n,
            "moved_share": self.moved / n,
            "rank_rpc_ms": 1000.0 * float(np.mean(self.rank_s)) if self.rank_s else float("nan"),
            "simulated_s": horizon / 1000.0,
        }


# ----------------------------------------------------------------------------- services
class SimClock:
    """The simulated clock in seconds, for a service created before its simulation (0 until then)."""

    def __init__(self) -> None:
        self.env: simpy.Environment | None = None

    def __call__(self) -> float:
        """Now, in simulated seconds."""
        return self.env.now / 1000.0 if self.env is not None else 0.0


def start_service(policy: str, config: Config, warm: list[Record], warm_path: Path, clock):
    """An in-process gRPC server for ``policy`` on the simulated ``clock``; (server, service, client)."""
    spec = "static" if policy == "static" else "rls"
    predictor = create(spec, seed=config.seed)
    if predictor.name == "static":
        predictor.fit(warm)  # offline on the warm part, then frozen
    topology = topology_of(config) if "network" in policy else None
    service = Service(ServiceConfig(predictor=spec, default_confidence=config.confidence, snapshot_every_s=0,
                                    observation_log=False, topology=topology), predictor=predictor, clock=clock)
    server, port = create_server("127.0.0.1:0", service)
    server.start()
    service.open(warm_start=warm_path)
    client = InterferenceClient(f"127.0.0.1:{port}", timeout=30)
    client.wait_ready(30)
    return server, service, client


def topology_of(config: Config) -> Topology:
    """The simulated cluster as the service's topology: device ``dev{i}`` on host ``h{i // devices_per_host}``
    in rack ``r{host // hosts_per_rack}``; same host: free; another host of the rack: ``host_gbps``;
    another rack: ``rack_gbps`` (no latency), as :meth:`Cluster.transfer_ms` moves inputs."""
    devices = {}
    for i in range(config.devices):
        host = i // config.devices_per_host
        devices[f"dev{i}"] = (f"h{host}", f"r{host // config.hosts_per_rack}")
    hosts = dict(devices.values())
    links = {"device": Link(math.inf, 0.0), "host": Link(math.inf, 0.0),
             "rack": Link(config.host_gbps / 8.0, 0.0), "remote": Link(config.rack_gbps / 8.0, 0.0)}
    return Topology(devices, hosts, links)


def capacity_per_s(config: Config, records: list[Record]) -> tuple[float, float, float]:
    """(nominal capacity per s, mean solo ms, slowdown at full co-location) of the pool."""
    solo = float(np.mean([r.solo_latency_ms for r in records]))
    full = [r.latency_ms / r.solo_latency_ms for r in records if len(r.co_runners) >= min(config.slots - 1, 2)]
    slowdown = float(np.mean(full)) if full else 1.0
    return config.devices * config.slots / (solo * slowdown / 1000.0), solo, slowdown


def run(config: Config, records: list[Record]) -> dict:
    """Every load and policy on one dataset's records (in stream order)."""
    records = [without_signals(r) for r in records if r.solo_latency_ms and r.latency_ms]
    cut = int(len(records) * config.warm_fraction)
    warm, replay = records[:cut], records[cut:]
    if not warm or not replay:
        raise ValueError("too few records to warm-start and replay")
    kind = replay[0].device_kind
    pool = LatencyPool(replay)
    capacity, solo, slowdown = capacity_per_s(config, replay)
    results: dict = {"capacity_per_s": capacity, "mean_solo_ms": solo, "full_slowdown": slowdown, "loads": {}}
    with tempfile.TemporaryDirectory() as tmp:
        warm_path = Path(tmp) / "warm.jsonl"
        write_records(warm_path, warm)
        for i, load_factor in enumerate(config.loads):
            rate = load_factor * capacity
            arrivals = poisson_arrivals(replay, rate, config.arrivals, config.seed + 1000 * i)
            row: dict = {"rate_per_s": rate, "policies": {}}
            for policy in config.policies:
                clock = SimClock()
                started = None
                if policy not in ("blind", "oracle"):
                    started = start_service(policy, config, warm, warm_path, clock)
                try:
                    cluster = Cluster(config, policy, started[2] if started else None, pool, kind,
                                      config.seed + 1000 * i)
                    clock.env = cluster.env
                    t0 = time.perf_counter()
                    pool.levels.clear()
                    r = cluster.run(arrivals)
                    r["wall_s"] = time.perf_counter() - t0
                finally:
                    if started is not None:
                        server, service, client = started
                        client.close()
                        stop_server(server, service, grace=0.2)
                row["policies"][policy] = r
                print(f"load {load_factor:g} ({rate:.0f}/s) {policy}: SLO {r['slo_attainment']:.1%}, goodput "
                      f"{r['goodput_per_s']:.0f}/s, p99 {r['p99_ms']:.1f} ms, utilisation {r['utilisation']:.0%} "
                      f"({r['wall_s']:.1f} s)", flush=True)
            against_oracle(row["policies"])
            results["loads"][f"{load_factor:g}"] = row
    return results


def against_oracle(policies: dict[str, dict]) -> None:
    """Add each policy's SLO attainment and goodput as a ratio of the oracle's (when the oracle was run)."""
    oracle = policies.get("oracle")
    if oracle is None:
        return
    for r in policies.values():
        r["slo_vs_oracle"] = r["slo_attainment"] / oracle["slo_attainment"] if oracle["slo_attainment"] else math.nan
        r["goodput_vs_oracle"] = r["goodput_per_s"] / oracle["goodput_per_s"] if oracle["goodput_per_s"] else math.nan


def markdown(results: dict) -> str:
    """One row per load and policy, with goodput relative to the blind policy and both SLO attainment and goodput
    relative to the oracle's."""
    lines = ["| load | policy | SLO attainment | x oracle | goodput (/s) | x oracle | x blind | p99 (ms) | utilisation "
             "| rank RPC (ms) |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for key, row in results["loads"].items():
        base = row["policies"].get("blind", {}).get("goodput_per_s")
        for policy, r in row["policies"].items():
            ratio = f"{r['goodput_per_s'] / base:.2f}" if base else "-"
            slo_x = f"{r['slo_vs_oracle']:.3f}" if "slo_vs_oracle" in r else "-"
            good_x = f"{r['goodput_vs_oracle']:.3f}" if "goodput_vs_oracle" in r else "-"
            lines.append(f"| {key} | {policy} | {r['slo_attainment']:.1%} | {slo_x} | {r['goodput_per_s']:.0f} | "
                         f"{good_x} | {ratio} | {r['p99_ms']:.1f} | {r['utilisation']:.0%} | {r['rank_rpc_ms']:.2f} |")
    return "\n".join(lines)


def plot(results: dict, path: Path, title: str) -> None:
    """SLO attainment, goodput, p99 and utilisation against load, a line per policy."""
    panels = (("slo_attainment", "SLO attainment (%)", 100), ("goodput_per_s", "goodput (met / s)", 1),
              ("p99_ms", "p99 latency (ms)", 1), ("utilisation", "device utilisation (%)", 100))
    plot_against_load(results, "policies", panels, path, title)


def main() -> None:
    """Run the study; print and write ``results.md``, ``results.json`` and the plot."""
    config, out = start("cluster_sim", Config(), __doc__.splitlines()[0])
    config = config.effective()
    records = load([config.dataset], config.data)[config.dataset]
    results = run(config, records)
    title = (f"{config.dataset}: {config.devices} devices x {config.slots} slots, {config.memory_mb:.0f} MB each, "
             f"deadline {config.slo_factor:g} x solo, confidence {config.confidence:g}")
    text = [f"# Cluster simulation: {title}", "",
            f"Nominal capacity {results['capacity_per_s']:.0f} batches/s (mean solo {results['mean_solo_ms']:.1f} ms, "
            f"slowdown {results['full_slowdown']:.2f} at full co-location); {config.arrivals} arrivals per run.", "",
            markdown(results), ""]
    print("\n".join(text))
    (out / "results.md").write_text("\n".join(text) + "\n")
    plot(results, out / "cluster.png", title)
    results["config"] = dataclasses.asdict(config)
    finish(out, results)


if __name__ == "__main__":
    main()

"""Study: are the answers a function of the ordered records alone? (``docs/design.md``, One truth)

Black-box over gRPC, real ``predictor serve`` processes on port 0, the records of
``tests/one_truth_data.py`` and its queries (with and without signals, overlaps given and omitted;
the latency, its 0.9 and 0.99 bounds, the probability of a 20 ms deadline):

* **message sizes**: the same records into fresh servers as ``ReportObservations`` messages of each
  of ``--sizes`` records, each server with its own ``PYTHONHASHSEED``; the largest relative
  difference of any answer from the first size's;
* **processes**: two fresh servers (two hash seeds) fed the same messages;
* **Ray Serve replicas** (``--replica``, in process, nothing pickled but what Ray sends): a replica
  (:class:`~predictor.ray_serve.pinned.PinnedService`) given the learner's publication, the model
  version alone (as before issue 39) and with the learner's books, against the learner's answers;
* **restarts** (``--kills``): a server with ``--state`` killed with SIGKILL at that many random
  points (a message in flight each time), restarted on its folder and fed the rest (an exactly-once
  producer: what was learned before the kill is dropped as a duplicate), against a server that never
  died fed the same messages.

Run: ``.venv/bin/python -m experiments.studies.one_truth --kills 10`` (a minute or two). ``--tree
DIR`` runs the servers from another checkout of the project (e.g. ``git archive HEAD | tar -x -C
DIR``) to measure it with the same client and records.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from one_truth_data import answers_of, max_relative, records  # noqa: E402

from predictor.rpc import convert  # noqa: E402
from predictor.rpc.client import InterferenceClient  # noqa: E402
from predictor.rpc.protos import load  # noqa: E402

pb2, _ = load()


class Server:
    """``predictor serve`` run from ``tree`` with a hash seed, until :meth:`kill` or :meth:`stop`."""

    def __init__(self, tree: Path, folder: Path, name: str, hash_seed: int, *args: str):
        folder.mkdir(parents=True, exist_ok=True)
        port_file = folder / f"{name}.port"
        port_file.unlink(missing_ok=True)
        env = dict(os.environ, PYTHONHASHSEED=str(hash_seed), PYTHONPATH=str(tree))
        self.log = open(folder / f"{name}.log", "ab")  # noqa: SIM115 - closed by stop/kill
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "predictor.cli", "serve", "--host", "127.0.0.1", "--port", "0",
             "--metrics-port", "0", "--port-file", str(port_file), "--grace", "0.5", *args],
            stdout=self.log, stderr=subprocess.STDOUT, cwd=tree, env=env)
        deadline = time.monotonic() + 120
        while not port_file.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not start: {(folder / f'{name}.log').read_text()}")
            time.sleep(0.02)
        self.target = f"127.0.0.1:{port_file.read_text().strip()}"
        self.client = InterferenceClient(self.target)
        self.client.wait_ready(120)

    def answers(self) -> list[float]:
        """The answers to the queries (:func:`one_truth_data.answers_of`)."""
        client = self.client
        return answers_of(client.predict, lambda q, d, c: client.check_deadline(q, d.ms, confidence=c))

    def kill(self) -> None:
        """SIGKILL: no handler runs, no final snapshot."""
        self.client.close()
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)
        self.log.close()

    def stop(self) -> None:
        """SIGTERM and wait (a final snapshot)."""
        self.client.close()
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(60)
        self.log.close()


def message(items, first: int = 0, producer: str = ""):
    """A ``ReportObservations`` message of ``items`` (numbered from ``first`` by ``producer``, if given)."""
    request = pb2.ReportObservationsRequest(records=[convert.record_to_pb(r) for r in items])
    if producer:
        request.producer_id, request.sequence = producer, first
    return request


def feed(server: Server, items, size: int) -> None:
    """Stream ``items`` to ``server`` in messages of ``size``, one stream."""
    messages = (message(items[at:at + size]) for at in range(0, len(items), size))
    server.client.stub.ReportObservations(messages, timeout=600)


def chunked_answers(tree: Path, folder: Path, items, size: int, seed: int) -> list[float]:
    """The answers of a fresh server (hash seed ``seed``) fed ``items`` in messages of ``size``."""
    server = Server(tree, folder, f"size{size}-seed{seed}", seed, "--snapshot-every", "0")
    try:
        feed(server, items, size)
        return server.answers()
    finally:
        server.stop()


def differences(a: list[float], b: list[float]) -> tuple[float, float, float]:
    """The largest relative differences of the latencies, the bounds and the probabilities
    (:func:`one_truth_data.answers_of` gives five numbers per query, in that layout)."""
    parts = ([0, 2], [1, 3], [4])
    return tuple(max_relative([x for i, x in enumerate(a) if i % 5 in p], [y for i, y in enumerate(b) if i % 5 in p])
                 for p in parts)


def restarts(tree: Path, folder: Path, items, size: int, kills: int,
             seed: int) -> tuple[tuple[float, ...], list[tuple[float, ...]]]:
    """:func:`differences` between a server killed ``kills`` times and one never killed, at the end and
    right after each restart (the message in flight at the kill sent again)."""
    rng = random.Random(seed)
    n = -(-len(items) // size)
    points = sorted(rng.sample(range(1, n - 1), kills))
    steady = Server(tree, folder, "steady", 1, "--state", str(folder / "steady"), "--snapshot-every", "0")
    args = ("--state", str(folder / "killed"), "--snapshot-every", "0.2", "--fsync", "batch")
    server = Server(tree, folder, "killed-0", 2, *args)
    after: list[float] = []
    try:
        sent = 0
        for k, point in enumerate([*points, n]):
            while sent < point:  # one stream per message: its answer acknowledges it
                first = sent * size
                server.client.stub.ReportObservations(iter([message(items[first:first + size], first + 1, "p")]),
                                                      timeout=120)
                steady.client.stub.ReportObservations(iter([message(items[first:first + size], first + 1, "p")]),
                                                      timeout=120)
                sent += 1
            if point == n:
                break
            # one more message in flight (sent, not acknowledged), then SIGKILL after a random delay
            release = threading.Event()
            first = sent * size

            def open_stream(first=first, release=release):
                yield message(items[first:first + size], first + 1, "p")
                release.wait(10)

            future = server.client.stub.ReportObservations.future(open_stream(), timeout=30)
            time.sleep(rng.uniform(0.0, 0.3))
            server.kill()
            release.set()
            try:
                future.result()
            except Exception:  # noqa: BLE001 - the stream dies with the server
                pass
            server = Server(tree, folder, f"killed-{k + 1}", 3 + k, *args)
            # the message in flight sent again (dropped as a duplicate where it was learned), then compared
            for client in (server.client, steady.client):
                client.stub.ReportObservations(iter([message(items[first:first + size], first + 1, "p")]),
                                               timeout=120)
            sent += 1
            after.append(differences(steady.answers(), server.answers()))
        return differences(steady.answers(), server.answers()), after
    finally:
        server.stop()
        steady.stop()


def replica(items) -> list[str]:
    """A Ray Serve replica's answers against its learner's, given the model version alone and with
    the books (:meth:`~predictor.ray_serve.learner.Learner.published_after`), as lines."""
    import pickle

    from one_truth_data import QUERIES, chunked

    from predictor.ray_serve.learner import Learner
    from predictor.ray_serve.pinned import PinnedService
    from predictor.service import ServiceConfig

    config = ServiceConfig(snapshot_every_s=0, observation_log=False)
    learner = Learner(config)
    learner.service.report_observations(chunked(items, [50]))
    version, books = learner.published_after(0)
    lines = []
    for name, given in (("the model version alone", (version,)), ("the version and the books", (version, books))):
        pinned = PinnedService(config)
        pinned.install(*pickle.loads(pickle.dumps(given)))
        diffs = []
        for query in QUERIES:
            a, b = learner.service.predict(query), pinned.service.predict(query)
            diffs.append(max_relative([a.latency_ms, a.upper_bound_ms], [b.latency_ms, b.upper_bound_ms]))
        lines.append(f"  a replica given {name}: {sum(d > 0 for d in diffs)} of {len(QUERIES)} answers differ from "
                     f"the learner's, by up to {max(diffs):.3g}")
    return lines


def show(a: list[float], b: list[float]) -> str:
    """:func:`differences` as ``latency / bounds / probability``."""
    return " / ".join(f"{d:.3g}" for d in differences(a, b))


def main() -> None:
    """Run the study (see the module)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", type=Path, default=ROOT, help="the checkout the servers run from")
    parser.add_argument("--records", type=int, default=1500)
    parser.add_argument("--sizes", default="1,7,50,500")
    parser.add_argument("--kills", type=int, default=0, help="kill points of the restart measurement (0: none)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--replica", action="store_true", help="also compare a Ray Serve replica with its learner")
    options = parser.parse_args()
    items = records(options.records)
    sizes = [int(s) for s in options.sizes.split(",")]
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        cases = [(size, 11 * (i + 1)) for i, size in enumerate(sizes)] + [(sizes[0], 99)]
        with ThreadPoolExecutor(2) as pool:
            got = list(pool.map(lambda c: chunked_answers(options.tree, folder, items, *c), cases))
        print(f"{len(items)} records, {len(got[0])} answers; tree {options.tree}")
        print("max relative difference (latency / bounds / probability of a 20 ms deadline):")
        for (size, seed), answers in zip(cases[1:-1], got[1:-1], strict=True):
            print(f"  messages of {size:>4} vs {sizes[0]} (hash seeds {seed} vs 11): " + show(got[0], answers))
        print(f"  two fresh servers, messages of {sizes[0]} (hash seeds 11 vs 99): " + show(got[0], got[-1]))
        if options.replica:
            print("\n".join(replica(items)))
        if options.kills:
            worst, after = restarts(options.tree, folder, items, 50, options.kills, options.seed)
            largest = tuple(map(max, zip(*after, strict=True)))
            print(f"  {options.kills} kill -9 points (messages of 50), vs a server never killed: at the end "
                  + " / ".join(f"{d:.3g}" for d in worst) + "; right after each restart, the largest "
                  + " / ".join(f"{d:.3g}" for d in largest))


if __name__ == "__main__":
    main()

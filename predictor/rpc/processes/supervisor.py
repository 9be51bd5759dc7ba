"""``predictor serve --workers N``: learner processes, answering workers on one port, and who watches them.

The supervisor (the process started by the command) starts, with ``multiprocessing``'s *spawn*:

* one learner per shard (:func:`~predictor.rpc.processes.learner.run_learner`; shards: ``--shard``,
  :mod:`predictor.service.replicas.shards`), each with its own state folder (``--state`` itself with one
  shard, ``--state/shard-<i>`` with several), reachable through a Unix socket in a private run
  folder, where it also writes its published versions;
* N answering workers (:func:`~predictor.rpc.processes.worker.run_worker`) listening on the same port
  (``SO_REUSEPORT``; the supervisor first reserves the port, refusing one in use, with a bound socket
  that never listens, so that the kernel spreads connections over its workers only), and each on a
  port of its own (reserved the same way, kept across the worker's restarts). The kernel spreads
  *connections* over the shared port at random: a client of few long-lived channels may find all of
  them on one worker. A client that opens its channel on the workers' own ports, the *balanced
  target* (``ipv4:HOST:P1,HOST:P2``: printed at start, written by ``--targets-file``), sends its
  calls round robin over every worker (:func:`~predictor.rpc.security.open_channel`).

It serves the Prometheus endpoint itself, summing every process's RPC metrics (prometheus-client's
multiprocess mode, :class:`~predictor.rpc.metrics.MultiProcessMetrics`), starts again any child
that dies, and on SIGINT/SIGTERM stops the workers first, then the learners (their final
snapshots).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from predictor.records.logio import read_records, write_records
from predictor.rpc.metrics import MultiProcessMetrics
from predictor.rpc.processes.learner import run_learner
from predictor.rpc.processes.options import balanced_target
from predictor.rpc.processes.ports import check_port_free
from predictor.rpc.processes.worker import run_worker
from predictor.rpc.security import metrics_policy, security_from_options, start_warnings
from predictor.service.config import ServiceConfig
from predictor.service.replicas.shards import ShardMap

RESTART_DELAY_S = 0.5
"""Wait before starting a dead child again (a child that dies at once is not restarted in a tight loop)."""


def reserve_port(host: str, port: int) -> socket.socket:
    """A socket bound (not listening) to ``host:port`` with ``SO_REUSEPORT``: the workers bind beside it.

    A port that another socket already holds (a server, or another supervisor's reservation) is refused
    first with :class:`~predictor.rpc.processes.ports.PortInUse` naming it: the port is shared among
    this supervisor's workers only.
    """
    check_port_free(host, port)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    return sock


RUN_PREFIX = "predictor-serve-"


def run_folder(base: str | None = None) -> Path:
    """A private folder for the run's sockets and version files (in ``/dev/shm`` where there is one),
    named after this process (``predictor-serve-<pid>-...``); the folders of earlier supervisors of
    this user that died without removing theirs (SIGKILL) are removed first (:func:`sweep_run_folders`)."""
    if base is None:
        base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()
    sweep_run_folders(base)
    folder = Path(tempfile.mkdtemp(prefix=f"{RUN_PREFIX}{os.getpid()}-", dir=base))
    folder.chmod(0o700)
    return folder


def sweep_run_folders(base: str | os.PathLike) -> list[Path]:
    """Remove the run folders in ``base`` left by supervisors of this user that no longer run; returns them.

    A folder is named after its supervisor's process id; it is removed only when it belongs to this
    user and no process of that id exists (a live process of that id, even an unrelated one, keeps it).
    """
    removed = []
    for folder in Path(base).glob(f"{RUN_PREFIX}*-*"):
        pid_text = folder.name[len(RUN_PREFIX):].split("-", 1)[0]
        try:
            if not pid_text.isdigit() or folder.stat().st_uid != os.getuid() or not folder.is_dir():
                continue
            os.kill(int(pid_text), 0)
        except ProcessLookupError:  # its supervisor is gone
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
        except OSError:  # alive under another user (PermissionError), or vanished meanwhile
            continue
    return removed


def split_warm_start(path: str | None, shards: ShardMap, folder: Path) -> list[str | None]:
    """The ``--warm-start`` log of each shard: the log itself with one shard, else its records of the
    shard's kinds, written to the run folder (lines that do not parse are left out, as a warm start does)."""
    if path is None or len(shards) == 1:
        return [path] * len(shards)

    records, _ = read_records(path, tolerant=True)
    paths = []
    for shard in range(len(shards)):
        part = folder / f"warm-start-{shard}.jsonl.gz"
        write_records(part, (r for r in records if shards.shard_of(r.device_kind) == shard))
        paths.append(str(part))
    return paths


class _Child:
    """One supervised process, started again when it dies."""

    def __init__(self, name: str, start: Callable[[], multiprocessing.process.BaseProcess]):
        self.name = name
        self._start = start
        self.process = start()
        self.restarts = 0

    def check(self) -> None:
        if self.process.is_alive():
            return
        print(f"predictor serve: {self.name} exited with {self.process.exitcode}; starting it again", flush=True)
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):  # its live gauges (a learner's model state) go
            from prometheus_client import multiprocess

            multiprocess.mark_process_dead(self.process.pid)
        time.sleep(RESTART_DELAY_S)
        self.process = self._start()
        self.restarts += 1

    def stop(self, timeout: float) -> None:
        if self.process.is_alive():
            os.kill(self.process.pid, signal.SIGTERM)
        self.process.join(timeout)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()


def serve_workers(config: ServiceConfig, options: Any, stop: threading.Event,
                  write_port: Callable[[str, int], None], install_signals: Callable[[threading.Event], None]) -> int:
    """Run learners and ``options.workers`` answering workers until ``stop`` is set; returns the exit status."""

    try:
        shards = ShardMap.parse(options.shards)
        credentials, policy = security_from_options(options)
        reserved = reserve_port(options.host, options.port)
        own = [reserve_port(options.host, 0) for _ in range(options.workers)]  # each worker's own port
    except (ValueError, OSError) as exc:
        print(f"predictor serve: error: {exc}", file=sys.stderr)
        return 2
    port = reserved.getsockname()[1]
    own_ports = [sock.getsockname()[1] for sock in own]
    target = balanced_target(options.host, own_ports)
    folder = run_folder()
    metrics_dir = folder / "metrics"
    metrics_dir.mkdir()
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)  # inherited by the children, read at their import
    ctx = multiprocessing.get_context("spawn")
    listening = ctx.Queue()
    serving = ctx.Queue()  # workers that have started up (their health SERVING)
    answers = [ctx.Queue() for _ in range(len(shards))]  # workers' remembered answers to each learner
    install_signals(stop)

    def state_dir(shard: int) -> str | None:
        if options.state_dir is None or len(shards) == 1:
            return options.state_dir
        return str(Path(options.state_dir) / f"shard-{shard}")

    try:
        warm = split_warm_start(options.warm_start, shards, folder)
    except (OSError, ValueError) as exc:
        print(f"predictor serve: error: --warm-start {options.warm_start}: {exc}", file=sys.stderr)
        for sock in (reserved, *own):
            sock.close()
        shutil.rmtree(folder, ignore_errors=True)
        return 2

    def learner(shard: int) -> Callable[[], Any]:
        def start() -> Any:
            process = ctx.Process(
                target=run_learner, name=f"learner-{shard}",
                args=(config, options, shard, shards, str(folder), state_dir(shard), warm[shard], answers[shard]),
            )
            process.start()
            return process
        return start

    def worker(index: int) -> Callable[[], Any]:
        starts = [0]

        def start() -> Any:
            # the first start listens at once (NOT_SERVING until ready); one started again binds once ready
            process = ctx.Process(target=run_worker, name=f"worker-{index}",
                                  args=(config, options, index, shards, str(folder), port, listening, serving,
                                        answers, starts[0] == 0, own_ports[index]))
            starts[0] += 1
            process.start()
            return process
        return start

    learners = [_Child(f"learner {i}", learner(i)) for i in range(len(shards))]
    workers = [_Child(f"worker {i}", worker(i)) for i in range(options.workers)]
    metrics = MultiProcessMetrics(str(metrics_dir))
    try:
        waiting = set(range(options.workers))
        while waiting and not stop.is_set():
            with contextlib.suppress(Exception):
                waiting.discard(listening.get(timeout=0.5))
            for child in (*learners, *workers):
                if not child.process.is_alive():
                    print(f"predictor serve: error: {child.name} exited with {child.process.exitcode} at start",
                          file=sys.stderr)
                    stop.set()
        if not stop.is_set():
            print(f"predictor serve: {options.workers} workers listening on {options.host}:{port}, "
                  f"{len(shards)} learner(s) (run folder {folder}); NOT_SERVING until ready", flush=True)
            print(f"predictor serve: {policy.describe()}", flush=True)
            for warning in start_warnings(options, policy, credentials):
                print(f"predictor serve: warning: {warning}", flush=True)
            print(f"predictor serve: balanced target (every worker's own port): {target}", flush=True)
            if options.targets_file:
                write_port(options.targets_file, target)
            if options.port_file:
                write_port(options.port_file, port)
            if options.metrics_port:
                metrics_port = metrics.serve(options.metrics_port, options.metrics_host,
                                             metrics_policy(options, policy))
                print(f"predictor serve: Prometheus metrics of all processes on "
                      f"http://{options.metrics_host}:{metrics_port}/metrics", flush=True)
        starting: set[int] | None = set(range(options.workers))  # None: all have served
        while not stop.wait(0.2):
            for child in (*learners, *workers):
                child.check()
                with contextlib.suppress(Exception):
                    while True:
                        listening.get_nowait()  # restarted workers say they listen
            with contextlib.suppress(Exception):
                while True:
                    index = serving.get_nowait()  # (restarted workers say so too)
                    if starting is not None:
                        starting.discard(index)
            if starting is not None and not starting:  # one line, once every worker answers
                print(f"predictor serve: {options.workers} workers answering on {options.host}:{port}; SERVING",
                      flush=True)
                starting = None
    finally:
        print(f"predictor serve: stopping (grace {options.grace_s:g} s)", flush=True)
        for child in workers:
            child.stop(options.grace_s + 10)
        for child in learners:
            child.stop(options.grace_s + 60)
        metrics.stop()
        for sock in (reserved, *own):
            sock.close()
        shutil.rmtree(folder, ignore_errors=True)
        if options.state_dir is not None:
            print(f"predictor serve: state saved in {options.state_dir}", flush=True)
    failed = any(c.process.exitcode not in (0, None) for c in (*learners, *workers))
    return 1 if failed else 0

"""The pool of worker processes: a shared job queue, one report pipe and one running slot per worker.

Workers are spawned (``multiprocessing`` ``spawn`` context: safe with CUDA and
threads), so the calling script must guard its entry point with
``if __name__ == "__main__":``. A worker that dies or reports an error turns
into a ``RuntimeError`` in the parent instead of a silent hang.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from collections import deque
from multiprocessing.connection import Connection, wait
from typing import Any

from collectors.slot import RunningSlot
from collectors.worker import WorkerConfig, worker_main


class WorkerPool:
    """The worker processes, the shared job queue, one report pipe and one running slot per worker."""

    def __init__(self, workers: int, config: WorkerConfig) -> None:
        ctx = mp.get_context("spawn")
        self.jobs = ctx.Queue()
        self.readers: list[Connection] = []
        self.slots = [RunningSlot(ctx) for _ in range(workers)]
        self.procs = []
        for i in range(workers):
            reader, writer = ctx.Pipe(duplex=False)
            proc = ctx.Process(
                target=worker_main,
                args=(i, config, self.jobs, writer, self.slots[i]),
                daemon=True,
                name=f"worker-{i}",
            )
            proc.start()
            writer.close()  # the worker holds the writing end; EOF here means it died
            self.readers.append(reader)
            self.procs.append(proc)
        self._inbox: deque[tuple[Any, ...]] = deque()

    def get(self, timeout: float) -> tuple[Any, ...] | None:
        """The next report, waiting up to ``timeout`` seconds; ``None`` if there is none."""
        if not self._inbox:
            for reader in wait(self.readers, max(0.0, timeout)):
                try:
                    while reader.poll():
                        self._inbox.append(reader.recv())
                except EOFError:
                    self.check_alive()
                    raise RuntimeError("a worker closed its report pipe") from None
        if not self._inbox:
            return None
        message = self._inbox.popleft()
        if message[0] == "error":
            raise RuntimeError(f"worker {message[1]} failed:\n{message[2]}")
        return message

    def check_alive(self) -> None:
        """Raise ``RuntimeError`` naming the workers whose process has exited."""
        dead = [p.name for p in self.procs if not p.is_alive()]
        if dead:
            raise RuntimeError(f"worker process(es) exited early: {', '.join(dead)}")

    def wait_for(self, kind: str, count: int, timeout: float) -> list[tuple[Any, ...]]:
        """The first ``count`` reports of ``kind`` (e.g. ``"ready"``), dropping other kinds.

        Raises ``RuntimeError`` after ``timeout`` seconds, or as soon as a worker dies or reports an error.
        """
        got: list[tuple[Any, ...]] = []
        deadline = time.monotonic() + timeout
        while len(got) < count:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RuntimeError(f"timed out waiting for {count} worker {kind!r} message(s)")
            self.check_alive()
            message = self.get(min(remaining, 0.5))
            if message is not None and message[0] == kind:
                got.append(message)
        return got

    def stop(self) -> None:
        """Ask every worker to stop, drain the pipes, terminate those alive after 10 s, close the queue."""
        for _ in self.procs:
            self.jobs.put(("stop",))
        deadline = time.monotonic() + 10.0
        for proc in self.procs:
            while proc.is_alive() and time.monotonic() < deadline:
                for reader in self.readers:  # keep the pipes flowing so no worker blocks on a send
                    try:
                        while reader.poll():
                            reader.recv()
                    except (EOFError, OSError):
                        pass
                proc.join(0.05)
        for proc in self.procs:
            if proc.is_alive():
                proc.terminate()
                proc.join(2.0)
        for reader in self.readers:
            reader.close()
        self.jobs.cancel_join_thread()
        self.jobs.close()

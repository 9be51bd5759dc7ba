"""BLAS threads: one per process unless the user asks otherwise.

The service's learners make many small BLAS calls (an RLS update of the default
model is a rank-1 update of a 192 × 192 matrix). With OpenBLAS's default of one
thread per core, each call wakes a second thread that then spins, which slows
every update and starves learning when another process competes for the cores.
Every entry point (the command line, the server, the demo, the benchmarks)
therefore limits BLAS to :data:`DEFAULT_THREADS` thread, through ``threadpoolctl``.

The limit comes from, in order: the argument, the ``PREDICTOR_BLAS_THREADS``
environment variable, then :data:`DEFAULT_THREADS`. ``0`` leaves BLAS as it is.

Examples
--------
>>> previous = pin_blas_threads(1)
>>> all(n == 1 for n in blas_threads().values())
True
>>> restore_blas_threads(previous)
"""

from __future__ import annotations

import logging
import os

from threadpoolctl import ThreadpoolController

ENV_VAR = "PREDICTOR_BLAS_THREADS"
DEFAULT_THREADS = 1



def _controller() -> ThreadpoolController:
    """A controller over the BLAS libraries the learners use, loaded first so that they are found.

    NumPy and SciPy may each bring their own OpenBLAS; both are limited.
    """
    import numpy  # noqa: F401  (loads NumPy's BLAS)
    import scipy.linalg.blas  # noqa: F401  (loads SciPy's BLAS, used by the RLS update)

    return ThreadpoolController()


def configured_threads(threads: int | None = None) -> int:
    """The BLAS thread limit to apply: ``threads``, else ``$PREDICTOR_BLAS_THREADS``, else 1.

    Raises
    ------
    ValueError
        When the environment variable is not a whole number ≥ 0 (naming it).
    """
    if threads is None:
        raw = os.environ.get(ENV_VAR, "").strip()
        if not raw:
            return DEFAULT_THREADS
        try:
            threads = int(raw)
        except ValueError:
            raise ValueError(f"{ENV_VAR}: expected a whole number of threads (0 = unlimited), got {raw!r}") from None
    if threads < 0:
        raise ValueError(f"BLAS threads: expected 0 (unlimited) or more, got {threads}")
    return threads


def blas_threads() -> dict[str, int]:
    """The thread count of each BLAS library loaded in this process, by its file path."""
    return {info["filepath"]: info["num_threads"] for info in _controller().info() if info["user_api"] == "blas"}


def pin_blas_threads(threads: int | None = None) -> dict[str, int]:
    """Limit every loaded BLAS library to ``threads`` (see :func:`configured_threads`) for good.

    Returns
    -------
    dict
        The thread counts before, for :func:`restore_blas_threads`.
    """
    before = blas_threads()
    limit = configured_threads(threads)
    if limit > 0:
        _controller().select(user_api="blas").limit(limits=limit)
    return before


def restore_blas_threads(previous: dict[str, int]) -> None:
    """Give each BLAS library back the thread count it had (``previous`` from :func:`pin_blas_threads`)."""
    for library in _controller().select(user_api="blas").lib_controllers:
        if library.filepath in previous:
            library.set_num_threads(previous[library.filepath])


def log_blas_threads(logger: logging.Logger) -> None:
    """Log the thread counts of the BLAS libraries loaded (``BLAS threads: 1``), as each server process starts."""
    counts = sorted(set(blas_threads().values()))
    logger.info("BLAS threads: %s", ",".join(map(str, counts)) or "no BLAS loaded")

"""Compiled kernels loaded before a server listens, so that no client's first call pays for them.

The learning path runs numba kernels (the RLS block update, the shape calibrator's block) that are
compiled once per process, or loaded from numba's disk cache: a few hundred ms the first time, on
the first observation a client sends. :func:`warm_ingest` runs that path once on a throwaway
service (no log, no snapshot: nothing of it is kept) on synthetic records, before the server
listens; :func:`predictor.service.estimates.fixed_point_kernel.warm` does the same for rankings.
"""

from __future__ import annotations

import dataclasses

from predictor.service.config import ServiceConfig
from predictor.service.core import Service
from predictor.service.synthetic import synthetic_records

WARM_RECORDS = 64


def warm_ingest(config: ServiceConfig) -> None:
    """Learn :data:`WARM_RECORDS` synthetic records through a throwaway service configured as ``config``."""
    scratch = Service(dataclasses.replace(config, observation_log=False, snapshot_every_s=0))
    scratch.open()
    try:
        scratch.report_observations([(record, "") for record in synthetic_records(WARM_RECORDS, seed=0)])
    finally:
        scratch.close()

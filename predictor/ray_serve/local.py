"""A local, in-process Ray for this project: few CPUs, no dashboard, workers importing this checkout.

Ray's worker processes import the project by name; :func:`start_local_ray` points their
``PYTHONPATH`` at the directory the driver imported :mod:`predictor` from, so that a
development checkout (not only an installed copy) runs the same code in every process.
"""

from __future__ import annotations

import os
from pathlib import Path

import ray


def project_root() -> Path:
    """The directory holding the :mod:`predictor` package the driver imported."""
    return Path(__file__).resolve().parents[2]  # predictor/ray_serve/local.py


def start_local_ray(num_cpus: int = 2) -> None:
    """Start Ray in this process (a no-op when it is already started).

    Parameters
    ----------
    num_cpus
        CPUs Ray may schedule on (the deployments here reserve none; this caps Ray's own workers).
    """
    if num_cpus < 1:
        raise ValueError(f"num_cpus must be >= 1, got {num_cpus!r}")
    if ray.is_initialized():
        return
    path = os.pathsep.join(p for p in (str(project_root()), os.environ.get("PYTHONPATH", "")) if p)
    ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": path}})

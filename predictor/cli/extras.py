"""Optional parts of the installation, and the message naming the extra that brings one.

``pip install interference-predictor`` (or ``pip install .``) is the service alone: ``serve``,
``query``, ``report``, ``replay``, ``evaluate`` and ``import`` work without PyTorch. The real
co-located workload (``predictor collect``, ``predictor demo``) runs PyTorch models, which come
with the ``workload`` extra: ``pip install 'interference-predictor[workload]'``.

Examples
--------
>>> isinstance(torch_installed(), bool)
True
>>> "[workload]" in (missing_workload("collect") or "[workload]")
True
"""

from __future__ import annotations

import importlib.util

WORKLOAD_EXTRA = "workload"
"""The extra of ``pyproject.toml`` that brings PyTorch for the real workload."""


def torch_installed() -> bool:
    """Whether ``import torch`` can succeed here, found without importing it (it is heavy)."""
    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        return False


def missing_workload(command: str) -> str | None:
    """``None`` when the real workload can run here; else why not and how to install it, naming the
    ``workload`` extra (``command``: the sub-command asking, e.g. ``collect``)."""
    if torch_installed():
        return None
    return (
        f"predictor {command}: the real workload runs PyTorch models, and torch is not installed here "
        "(a light install: the service alone).\n"
        f"  install the extra:  pip install 'interference-predictor[{WORKLOAD_EXTRA}]'   "
        f"(from a checkout: pip install '.[{WORKLOAD_EXTRA}]')\n"
        "  on a machine without a GPU, take the CPU build of torch first:\n"
        "    pip install torch --index-url https://download.pytorch.org/whl/cpu"
    )

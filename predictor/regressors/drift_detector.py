"""River's ADWIN drift detector, imported only where one is made.

``river.drift`` imports ``river.datasets``, which imports scikit-learn and ``scipy.stats``: most of
a second. A process that only answers from a published model (``predictor serve --workers N``'s
answering workers, ``predictor query``) needs none of it, so the modules that watch for drift
(the service's error monitor, ``rls`` with ``drift_reset``) call :func:`adwin_class` when they are
built, not when they are imported.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from river.drift import ADWIN


def adwin_class() -> type[ADWIN]:
    """``river.drift.ADWIN``, importing river's ``drift`` package on the first call."""
    from river.drift import ADWIN

    return ADWIN

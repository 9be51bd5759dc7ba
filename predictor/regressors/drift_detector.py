"""ADWIN, the adaptive-window drift detector, as river's ``drift.ADWIN`` computes it, without river's ``drift`` package.

River's ``ADWIN`` is a thin wrapper around a compiled helper (``river._river_rust.drift.AdaptiveWindowing``);
importing it through ``river.drift`` also imports ``river.datasets``, scikit-learn and ``scipy.stats``
(over a second of start-up in every process that learns). :class:`Adwin` wraps the same helper the
same way, so that its alarms, window and estimate are river's to the bit; the service's error monitor
(:mod:`predictor.service.monitor`) and ``rls`` with ``drift_reset`` use it.

Examples
--------
>>> detector = Adwin()
>>> alarms = []
>>> for i in range(2000):
...     _ = detector.update(0.0 if i < 1000 else 1.0)
...     if detector.drift_detected:
...         alarms.append(i)
>>> alarms[0] > 1000, detector.estimation > 0.9
(True, True)
"""

from __future__ import annotations

from river._river_rust.drift import AdaptiveWindowing


class Adwin:
    """ADWIN: flags a change in the mean of a stream once two sub-windows of its adaptive window differ.

    Parameters
    ----------
    delta
        Confidence: smaller values raise fewer, surer alarms.
    clock
        How often (in updates) the window is checked for a change.
    max_buckets
        Buckets kept per row of the window's exponential histogram.
    min_window_length
        Shortest sub-window compared.
    grace_period
        Updates before the first check.
    """

    def __init__(self, delta: float = 0.002, clock: int = 32, max_buckets: int = 5, min_window_length: int = 5,
                 grace_period: int = 10):
        self.delta = delta
        self.clock = clock
        self.max_buckets = max_buckets
        self.min_window_length = min_window_length
        self.grace_period = grace_period
        self._reset()

    def _reset(self) -> None:
        self._drift_detected = False
        self._helper = AdaptiveWindowing(delta=self.delta, clock=self.clock, max_buckets=self.max_buckets,
                                         min_window_length=self.min_window_length, grace_period=self.grace_period)

    @property
    def drift_detected(self) -> bool:
        """Whether the last update raised an alarm (the next update starts a fresh window)."""
        return self._drift_detected

    @property
    def width(self) -> int:
        """Values in the window."""
        return self._helper.get_width()

    @property
    def n_detections(self) -> int:
        """Alarms raised since the window was last started afresh."""
        return self._helper.get_n_detections()

    @property
    def variance(self) -> float:
        """The window's sample variance."""
        return self._helper.get_variance()

    @property
    def total(self) -> float:
        """The sum of the window's values."""
        return self._helper.get_total()

    @property
    def estimation(self) -> float:
        """The window's mean (0 while it is empty)."""
        if self.width == 0:
            return 0.0
        return self.total / self.width

    def update(self, x: float) -> Adwin:
        """Add ``x`` to the window (after an alarm, to a fresh one) and check for a change."""
        if self._drift_detected:
            self._reset()
        self._drift_detected = self._helper.update(x)
        return self

"""``Adwin`` against river's ``drift.ADWIN``: the same alarms, window and estimate, without river's drift package."""

from __future__ import annotations

import pickle
import subprocess
import sys

from hypothesis import given, settings
from hypothesis import strategies as st
from river.drift import ADWIN

from predictor.regressors.drift_detector import Adwin

levels = st.lists(st.floats(0.0, 5.0, allow_nan=False), min_size=1, max_size=4)


@st.composite
def streams(draw):
    """A stream of noisy values whose mean jumps between a few levels (so that alarms happen)."""
    stream = []
    for level in draw(levels):
        length = draw(st.integers(1, 400))
        noise = draw(st.lists(st.floats(-0.5, 0.5, allow_nan=False), min_size=length, max_size=length))
        stream.extend(level + e for e in noise)
    return stream


def _same(ours: Adwin, river: ADWIN) -> None:
    assert ours.drift_detected == river.drift_detected
    assert ours.width == river.width
    assert ours.n_detections == river.n_detections
    assert ours.total.hex() == river.total.hex()
    assert ours.variance.hex() == river.variance.hex()
    assert ours.estimation.hex() == river.estimation.hex()


@settings(max_examples=60, deadline=None)
@given(streams(), st.sampled_from([0.002, 0.01, 0.2]), st.sampled_from([8, 32]))
def test_adwin_is_rivers_to_the_bit(stream, delta, clock):
    ours, river = Adwin(delta=delta, clock=clock), ADWIN(delta=delta, clock=clock)
    for x in stream:
        ours.update(x)
        river.update(x)
        _same(ours, river)


@settings(max_examples=20, deadline=None)
@given(streams(), st.integers(0, 1000))
def test_a_pickled_detector_goes_on_as_the_original(stream, cut):
    cut = min(cut, len(stream))
    ours, river = Adwin(), ADWIN()
    for x in stream[:cut]:
        ours.update(x)
        river.update(x)
    ours = pickle.loads(pickle.dumps(ours))
    for x in stream[cut:]:
        ours.update(x)
        river.update(x)
        _same(ours, river)


def test_the_learning_service_starts_without_rivers_drift_package_scikit_learn_or_scipy_stats():
    """The service's error monitor and ``rls``'s drift resets no longer pull river's drift package, and with
    it scikit-learn and ``scipy.stats``, into every learning process."""
    code = (
        "import sys\n"
        "from predictor.service.config import ServiceConfig\n"
        "from predictor.service.core import Service\n"
        "from predictor.service.synthetic import synthetic_records\n"
        "service = Service(ServiceConfig(predictor=\"rls:drift_reset=True\")); service.open()\n"
        "for record in synthetic_records(50, seed=1): service.observe(record)\n"
        "print(sorted(m for m in sys.modules if m.startswith(('river.drift', 'sklearn', 'scipy.stats'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"

"""The admission monitor's slices (:meth:`ShapeMonitor.slices
<predictor.service.monitor.ShapeMonitor.slices>`): each row is :meth:`ShapeMonitor.summary` of its
slice, the same numbers bit for bit, in the order per source and shape: all answers, then per
co-runner count, per device kind and per model, each sorted."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from predictor.service.monitor import ANY, ShapeMonitor

_answer = st.tuples(st.sampled_from(["replay", "live"]), st.sampled_from(["unknown/nosig", "overlap/sig"]),
                    st.sampled_from(["A100", "T4", ANY]), st.sampled_from(["bert", "resnet"]),
                    st.integers(0, 3), st.floats(1.0, 100.0), st.floats(1.0, 100.0), st.booleans())


@settings(max_examples=60, deadline=None)
@given(st.lists(_answer, max_size=60), st.integers(2, 40))
def test_each_slice_is_the_summary_of_that_slice(answers, max_keys):
    monitor = ShapeMonitor(max_keys=max_keys)
    for source, shape, kind, model, count, actual, predicted, covered in answers:
        monitor.update(source, shape, kind, model, count, actual=actual, predicted=predicted, covered=covered)
    expected = []
    for source, shape in monitor.sources():
        keys = [k for k in monitor._counts if k[:2] == (source, shape)]
        expected.append(monitor.summary(source, shape))
        expected += [monitor.summary(source, shape, count=c) for c in sorted({k[4] for k in keys})]
        expected += [monitor.summary(source, shape, kind=kd) for kd in sorted({k[2] for k in keys})]
        expected += [monitor.summary(source, shape, model=m) for m in sorted({k[3] for k in keys})]
    assert monitor.slices(max_rows=10_000) == expected
    assert monitor.slices(max_rows=5) == expected[:5]

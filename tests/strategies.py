"""Hypothesis strategies for ``coloc/v1`` records, shared by the tests."""

from __future__ import annotations

from hypothesis import strategies as st

from predictor.records.record import BatchSpec, CoRunner, Record

names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-.", min_size=1, max_size=12)
finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)
positive = st.floats(min_value=1e-3, max_value=1e5, allow_nan=False, allow_infinity=False)
numeric_maps = st.dictionaries(names, finite, max_size=4)
batch_sizes = st.integers(min_value=1, max_value=256)

co_runners = st.builds(
    CoRunner,
    model=names,
    batch_size=batch_sizes,
    attrs=numeric_maps,
    overlap=st.floats(min_value=0.0, max_value=1.0),
)

records = st.builds(
    Record,
    device=names,
    batch=st.builds(BatchSpec, model=names, batch_size=batch_sizes, attrs=numeric_maps),
    latency_ms=positive,
    device_kind=st.one_of(st.just(""), names),
    start_s=st.one_of(st.none(), finite),
    solo_latency_ms=st.one_of(st.none(), positive),
    co_runners=st.lists(co_runners, max_size=4).map(tuple),
    signals=numeric_maps,
    source=st.one_of(st.just(""), names),
)

# Records in a small, learnable world: few models, attributes in [0, 1].
unit = st.floats(min_value=0.0, max_value=1.0)
small_models = st.sampled_from(["resnet", "bert", "vgg"])
learnable_records = st.builds(
    Record,
    device=st.sampled_from(["gpu0", "gpu1"]),
    batch=st.builds(BatchSpec, model=small_models, batch_size=st.integers(1, 8),
                    attrs=st.fixed_dictionaries({"l2_util": unit, "dram_util": unit})),
    latency_ms=st.floats(min_value=1.0, max_value=50.0),
    device_kind=st.just("kind"),
    solo_latency_ms=st.one_of(st.none(), st.floats(min_value=1.0, max_value=20.0)),
    co_runners=st.lists(
        st.builds(CoRunner, model=small_models, batch_size=st.integers(1, 8),
                  attrs=st.fixed_dictionaries({"l2_util": unit, "dram_util": unit}), overlap=unit),
        max_size=3,
    ).map(tuple),
    signals=st.fixed_dictionaries({"sm_util": unit}),
)

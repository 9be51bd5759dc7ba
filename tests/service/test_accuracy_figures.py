"""The accuracy figures the docs publish, held: a change that moves them fails here.

Each dataset is streamed through a fresh service with the default learner
(:class:`~predictor.service.config.ServiceConfig`), asking before each record the
question a scheduler asks before dispatch (:mod:`predictor.analysis.admission_replay`),
and replayed prequentially (:func:`~predictor.analysis.admission_replay.prequential_mape`).
Both are functions of the ordered records alone, so the figures are exact; the
tolerances leave room for rounding, not for a regression. The figures are those of
``docs/results.md`` ("Calibrated for the question asked", the prequential table):
when a change moves them on purpose, update both together.

The third-party GPU datasets are used when ``$INTERFERENCE_DATA`` holds them and
skipped otherwise.
"""

from __future__ import annotations

import pytest

from experiments.datasets import locate
from predictor.analysis.admission_replay import prequential_mape, replay
from predictor.records.logio import read_records
from predictor.service.config import ServiceConfig

FIGURES = {
    # learner: dataset: (prequential MAPE %, admission MAPE %, coverage at 0.95, coverage at 0.99)
    "ensemble:experts='rls,sgd'": {
        "cpu-default": (7.88, 8.58, 0.9547, 0.9914),
        "igniter": (1.18, 1.14, 0.9627, 0.9933),
        "gpulet": (4.42, 4.44, 0.9603, 0.9929),
    },
}
OTHER_LEARNERS = {
    # learner: dataset: prequential MAPE %
    "ensemble": {"cpu-default": 7.66, "igniter": 1.08, "gpulet": 4.36},
    "rls": {"cpu-default": 8.50, "igniter": 1.25, "gpulet": 8.14},
}
PREQUENTIAL_POINTS = 0.1
"""How far (percentage points) the prequential MAPE may move: rounding, not a change of learner."""
ADMISSION_POINTS = 0.3
"""How far the admission-time MAPE may move (the calibration's replay sums in another order)."""
COVERAGE = 0.005
BANDS = {0.95: (0.94, 0.97), 0.99: (0.985, 0.997)}
"""Where the coverage must lie whatever the figure: the calibration targets."""
ADMISSION_OVER_PREQUENTIAL = 1.2
"""What a scheduler is told before dispatch, at most this multiple of the error once the batch ran."""


@pytest.mark.parametrize("dataset", ["cpu-default", "igniter", "gpulet"])
def test_the_published_accuracy_figures_hold(dataset):
    learner = ServiceConfig().predictor
    assert learner in FIGURES, f"no published figures for the default learner {learner!r}: add them"
    path, reason = locate(dataset)
    if path is None:
        pytest.skip(f"{dataset}: {reason}")
    prequential, admission, cov95, cov99 = FIGURES[learner][dataset]

    records = read_records(path)[0]
    observed = prequential_mape(records, learner)
    assert observed == pytest.approx(prequential, abs=PREQUENTIAL_POINTS), "prequential MAPE moved"

    result = replay(records, dataset)
    assert result.refused == 0 and result.fallback <= 1  # only the very first answer has no basis
    assert result.total.mape == pytest.approx(admission, abs=ADMISSION_POINTS), "admission-time MAPE moved"
    for level, figure in ((0.95, cov95), (0.99, cov99)):
        coverage = result.total.coverage(level)
        low, high = BANDS[level]
        assert low <= coverage <= high, f"coverage at {level} is {coverage:.4f}, outside [{low}, {high}]"
        assert coverage == pytest.approx(figure, abs=COVERAGE), f"coverage at {level} moved"
    assert result.total.mape <= ADMISSION_OVER_PREQUENTIAL * observed


@pytest.mark.slow
@pytest.mark.parametrize("learner, dataset", [(learner, dataset) for learner, figures in OTHER_LEARNERS.items()
                                              for dataset in figures])
def test_the_published_prequential_figures_of_the_other_learners_hold(learner, dataset):
    path, reason = locate(dataset)
    if path is None:
        pytest.skip(f"{dataset}: {reason}")
    observed = prequential_mape(read_records(path)[0], learner)
    assert observed == pytest.approx(OTHER_LEARNERS[learner][dataset], abs=PREQUENTIAL_POINTS)

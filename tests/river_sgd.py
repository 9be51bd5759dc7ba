"""River's own ``MaxAbsScaler | LinearRegression(optimizer=SGD)`` pipeline, the reference of
:class:`~predictor.predictors.sgd_model.SgdModel`, shared by the tests: a pipeline holding a model's
state, and either's state as plain values (to compare to the bit)."""

from __future__ import annotations

import struct

from river import linear_model, optim, preprocessing, utils

from predictor.predictors.sgd_model import SgdModel


def river_pipeline(model: SgdModel):
    """River's pipeline with ``model``'s hyperparameters and state (what the ``sgd`` predictor held
    before :class:`SgdModel`)."""
    pipeline = preprocessing.MaxAbsScaler() | linear_model.LinearRegression(
        optimizer=optim.SGD(model.learning_rate), intercept_init=model.intercept, intercept_lr=model.intercept_lr,
        l2=model.l2, clip_gradient=model.clip_gradient)
    scaler, linear = pipeline["MaxAbsScaler"], pipeline["LinearRegression"]
    for name, largest in model.abs_max.items():
        scaler.abs_max[name].abs_max = largest
    linear._weights = utils.VectorDict(dict(model.weights))
    linear.optimizer.n_iterations = model.n_iterations
    return pipeline


def bits(values) -> list[bytes]:
    """Each float's 8 bytes (``-0.0`` differs from ``0.0``; a NaN equals a NaN of the same bits)."""
    return [struct.pack("<d", float(v)) for v in values]


def river_state(pipeline) -> tuple:
    """The pipeline's maxima and weights (names in order, values' bits), intercept and steps."""
    scaler, linear = pipeline["MaxAbsScaler"], pipeline["LinearRegression"]
    maxima = {name: found.get() for name, found in scaler.abs_max.items()}
    weights = linear._weights.to_dict()
    return (list(maxima), bits(maxima.values()), list(weights), bits(weights.values()), bits([linear.intercept]),
            linear.optimizer.n_iterations)


def model_state(model: SgdModel) -> tuple:
    """:func:`river_state` of an :class:`SgdModel`."""
    return (list(model.abs_max), bits(model.abs_max.values()), list(model.weights), bits(model.weights.values()),
            bits([model.intercept]), model.n_iterations)

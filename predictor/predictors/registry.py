"""Predictors by name, and ``name:key=value,...`` specifications.

Examples
--------
>>> create("ewma:alpha=0.5")
EwmaPredictor(alpha=0.5, fit_after=200, ridge=1e-06, non_negative=True, seed=0)
>>> create("nope")
Traceback (most recent call last):
...
ValueError: predictor: unknown name 'nope'; known: ensemble, ewma, forest, rls, sgd, solo, static, tree
"""

from __future__ import annotations

import ast
import importlib

from predictor.predictors.base import LatencyPredictor

# the built-in predictors, imported on first use: a process that only answers from a published
# rls model need not import scikit-learn (static), river's forest or LightGBM (about a second)
BUILT_IN = {
    "solo": "predictor.predictors.solo:SoloPredictor",
    "static": "predictor.predictors.static:StaticPredictor",
    "ewma": "predictor.predictors.ewma:EwmaPredictor",
    "sgd": "predictor.predictors.sgd:SgdPredictor",
    "rls": "predictor.predictors.rls:RlsPredictor",
    "forest": "predictor.predictors.forest:ForestPredictor",
    "ensemble": "predictor.predictors.ensemble:EnsemblePredictor",
    "tree": "predictor.predictors.tree:TreePredictor",
}
REGISTRY: dict[str, type[LatencyPredictor] | str] = dict(BUILT_IN)
DEFAULT = "ensemble:experts='rls,sgd'"
"""The learner a service, a replay, an evaluation and the demo use unless told otherwise (``--predictor``)."""


def register(cls: type[LatencyPredictor]) -> type[LatencyPredictor]:
    """Register a predictor class under its ``name`` (usable as a decorator)."""
    if not cls.name:
        raise ValueError(f"{cls.__name__} has no name")
    REGISTRY[cls.name] = cls
    return cls


def predictor_class(name: str) -> type[LatencyPredictor]:
    """The class registered as ``name`` (a built-in one imported now if it was not yet)."""
    entry = REGISTRY[name]
    if isinstance(entry, str):
        module, _, attribute = entry.partition(":")
        entry = REGISTRY[name] = getattr(importlib.import_module(module), attribute)
    return entry


def available() -> list[str]:
    """Registered names, sorted."""
    return sorted(REGISTRY)


def parse_spec(spec: str) -> tuple[str, dict[str, object]]:
    """Split ``"rls:forgetting=0.99,split_by='model'"`` into a name and arguments."""
    name, _, rest = spec.strip().partition(":")
    params: dict[str, object] = {}
    for item in filter(None, (p.strip() for p in _split_outside_quotes(rest))):
        key, sep, raw = item.partition("=")
        if not sep:
            raise ValueError(f"predictor {name}: expected key=value, got {item!r}")
        try:
            params[key.strip()] = ast.literal_eval(raw.strip())
        except (ValueError, SyntaxError):
            params[key.strip()] = raw.strip()
    return name, params


def _split_outside_quotes(text: str) -> list[str]:
    """Split on commas that are not inside single or double quotes.

    >>> _split_outside_quotes("a=1,b='x,y',c=2")
    ['a=1', "b='x,y'", 'c=2']
    """
    parts, current, quote = [], [], ""
    for char in text:
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == ",":
            parts.append("".join(current))
            current = []
            continue
        current.append(char)
    parts.append("".join(current))
    return parts


def create(spec: str, **overrides: object) -> LatencyPredictor:
    """Build a predictor from a name or ``name:key=value,...`` spec."""
    name, params = parse_spec(spec)
    if name not in REGISTRY:
        raise ValueError(f"predictor: unknown name {name!r}; known: {', '.join(available())}")
    params.update(overrides)
    try:
        return predictor_class(name)(**params)  # type: ignore[arg-type]
    except TypeError as exc:
        raise ValueError(f"predictor {name}: {exc}") from None

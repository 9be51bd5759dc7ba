"""Workload schedules: which models receive requests, at what rate, from when.

A schedule is a list of phases; each phase starts at a time (seconds from the
start of the run) and sets the active models and the total request rate,
shared equally by those models. It lets a run change its mix or load at given
times, so that drift can be studied.

Text syntax (the ``--schedule`` option)::

    START:MODELS@RATE;START:MODELS@RATE;...

``START`` is in seconds (the first phase starts at 0), ``MODELS`` a comma
list of model names (``*`` for all of ``--models``), ``RATE`` requests per
second over all the phase's models. Either part may be left out to keep the
previous phase's value: ``60:@80`` changes the rate only, ``60:vgg,mlp`` the
mix only. A JSON file holds the same as a list of objects::

    [{"at": 0, "models": ["resnet", "bert"], "rate": 40},
     {"at": 60, "models": ["vgg", "gpt2"], "rate": 80}]

Examples
--------
>>> phases = parse_schedule("0:resnet,bert@40;60:@80;90:vgg")
>>> [(p.start_s, p.models, p.rate) for p in phases]
[(0.0, ('resnet', 'bert'), 40.0), (60.0, ('resnet', 'bert'), 80.0), (90.0, ('vgg',), 80.0)]
>>> phase_at(phases, 75.0).rate
80.0
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True, slots=True)
class Phase:
    """From ``start_s`` on, ``models`` receive ``rate`` requests per second in total."""

    start_s: float
    models: tuple[str, ...]
    rate: float

    def rate_per_model(self) -> float:
        """Each active model's Poisson rate."""
        return self.rate / len(self.models) if self.models else 0.0


def validate_phases(phases: list[Phase], known: Sequence[str] | None = None) -> list[Phase]:
    """Check a schedule (first phase at 0, increasing starts, rates >= 0, known models); returns it."""
    if not phases:
        raise ValueError("schedule: no phases")
    if phases[0].start_s != 0.0:
        raise ValueError(f"schedule: the first phase must start at 0, not {phases[0].start_s:g}")
    for before, after in zip(phases, phases[1:], strict=False):
        if after.start_s <= before.start_s:
            raise ValueError(
                f"schedule: phase starts must increase ({before.start_s:g} then {after.start_s:g})"
            )
    for phase in phases:
        if not (math.isfinite(phase.rate) and phase.rate >= 0):
            raise ValueError(f"schedule: rate must be a finite number >= 0, got {phase.rate!r}")
        if not phase.models:
            raise ValueError(f"schedule: phase at {phase.start_s:g}s has no models")
        if known is not None:
            unknown = [m for m in phase.models if m not in known]
            if unknown:
                raise ValueError(
                    f"schedule: unknown model(s) {', '.join(unknown)}; choose from {', '.join(known)}"
                )
    return phases


def _models(text: str, previous: tuple[str, ...] | None, default: Sequence[str]) -> tuple[str, ...]:
    text = text.strip()
    if not text:
        if previous is None:
            return tuple(default)
        return previous
    if text in ("*", "all"):
        return tuple(default)
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    return tuple(dict.fromkeys(names))


def parse_schedule(
    text: str,
    *,
    default_models: Sequence[str] = (),
    default_rate: float | None = None,
    known: Sequence[str] | None = None,
) -> list[Phase]:
    """Parse the text syntax, or read a JSON file when ``text`` names an existing file.

    Parameters
    ----------
    text
        ``"0:resnet,bert@40;60:vgg@80"`` or a path to a JSON file.
    default_models
        Models of a phase that names none (and of ``*``).
    default_rate
        Rate of a first phase that gives none.
    known
        Valid model names, to reject typos early.

    Raises
    ------
    ValueError
        Naming the offending phase.
    """
    if os.path.isfile(text):
        return _from_json(json.loads(Path(text).read_text()), default_models, default_rate, known)
    phases: list[Phase] = []
    for chunk in (c.strip() for c in text.split(";")):
        if not chunk:
            continue
        start_text, sep, rest = chunk.partition(":")
        if not sep:
            raise ValueError(f"schedule: {chunk!r} is not START:MODELS@RATE")
        models_text, at, rate_text = rest.partition("@")
        try:
            start = float(start_text)
            rate = float(rate_text) if at and rate_text.strip() else None
        except ValueError:
            raise ValueError(f"schedule: {chunk!r} is not START:MODELS@RATE (numbers expected)") from None
        previous = phases[-1] if phases else None
        if rate is None:
            rate = previous.rate if previous is not None else default_rate
        if rate is None:
            raise ValueError(f"schedule: phase {chunk!r} needs a rate (@RATE)")
        models = _models(models_text, previous.models if previous else None, default_models)
        phases.append(Phase(start, models, rate))
    return validate_phases(phases, known)


def _from_json(
    data: Any, default_models: Sequence[str], default_rate: float | None, known: Sequence[str] | None
) -> list[Phase]:
    if not isinstance(data, list):
        raise ValueError("schedule file: expected a JSON list of {at, models, rate} objects")
    phases: list[Phase] = []
    for i, item in enumerate(data):
        if not isinstance(item, dict):
            raise ValueError(f"schedule file: item {i} is not an object")
        previous = phases[-1] if phases else None
        models_raw = item.get("models")
        if models_raw is None:
            models = previous.models if previous else tuple(default_models)
        elif isinstance(models_raw, str):
            models = _models(models_raw, previous.models if previous else None, default_models)
        else:
            models = tuple(dict.fromkeys(str(m) for m in models_raw))
        rate = item.get("rate", previous.rate if previous else default_rate)
        if rate is None:
            raise ValueError(f"schedule file: item {i} needs a rate")
        try:
            phases.append(Phase(float(item.get("at", 0.0)), models, float(rate)))
        except (TypeError, ValueError):
            raise ValueError(f"schedule file: item {i} has a non-numeric at or rate") from None
    return validate_phases(phases, known)


def constant_schedule(models: Sequence[str], rate: float) -> list[Phase]:
    """One phase: ``models`` at ``rate`` for the whole run."""
    return validate_phases([Phase(0.0, tuple(dict.fromkeys(models)), float(rate))], None)


def phase_at(phases: Sequence[Phase], t: float) -> Phase:
    """The phase in force at ``t`` seconds into the run."""
    current = phases[0]
    for phase in phases:
        if phase.start_s <= t:
            current = phase
        else:
            break
    return current


def schedule_models(phases: Sequence[Phase]) -> tuple[str, ...]:
    """Every model any phase uses, in first-use order."""
    return tuple(dict.fromkeys(m for p in phases for m in p.models))

"""Which features measure contention: the ones a model must not weigh negatively.

A feature is a *contention* feature when it grows with crowding: adding a co-runner,
raising a co-runner's overlap or its batch size never lowers it (for non-negative
attributes). Those of :mod:`predictor.features.extract` are the co-runner sums (``co:K``,
``co:count``, ``co:overlap``, ``co:log_batch``), the per-model and per-pair overlaps
(``co_model:M``, ``pair:A|M``), the crosses with the batch's own attributes (``x:K``),
and any interaction term (``a*b``, ``m:MODEL*K``) with a contention factor.

A linear model whose weights on these features are non-negative predicts a latency that
never falls as the device gets more crowded (the physical prior of
``DESIGN.md``: contention does not speed a batch up).

Examples
--------
>>> [is_contention(n) for n in ("co:l2_util", "own:l2_util", "sig:sm_util", "log_batch*co:overlap",
...                              "m:bert*co:count", "m:bert*own:l2", "pair:a|b", "x:l2")]
[True, False, False, True, True, False, True, True]
"""

from __future__ import annotations

import functools

PREFIXES = ("co:", "co_model:", "pair:", "x:")
"""Name prefixes of the contention features (factors of an interaction term included)."""


@functools.lru_cache(maxsize=65536)
def is_contention(name: str) -> bool:
    """Whether the feature ``name`` measures contention (see the module's docstring)."""
    return any(part.startswith(PREFIXES) for part in name.split("*"))

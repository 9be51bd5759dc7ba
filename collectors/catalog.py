"""Names of the workload models, importable without ``torch``.

:mod:`collectors.models` defines them (and checks it defines exactly these).

Examples
--------
>>> MODEL_NAMES
('resnet', 'vgg', 'mobilenet', 'bert', 'gpt2', 'mlp')
"""

from __future__ import annotations

MODEL_NAMES: tuple[str, ...] = ("resnet", "vgg", "mobilenet", "bert", "gpt2", "mlp")

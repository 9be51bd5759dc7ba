"""A package's names loaded on first use (:pep:`562`), so that importing the package stays light.

Examples
--------
>>> namespace = {"__name__": "example", "__all__": ["sqrt"]}
>>> __getattr__, __dir__ = lazy_exports(namespace, {"sqrt": ("math", "sqrt")})
>>> __getattr__("sqrt")(9.0), "sqrt" in namespace
(3.0, True)
>>> __dir__()
['__all__', '__name__', 'sqrt']
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(namespace: dict[str, Any], exports: Mapping[str, tuple[str, str]]
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of the package whose ``globals()`` is ``namespace``: each name
    of ``exports`` (name -> its module and the attribute there) imported on first access and kept in
    ``namespace`` (later look-ups skip ``__getattr__``); any other name an ``AttributeError``."""
    package = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        try:
            module, attribute = exports[name]
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        value = namespace[name] = getattr(importlib.import_module(module), attribute)
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(namespace["__all__"]))

    return __getattr__, __dir__

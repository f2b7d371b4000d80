"""mtp_core: the library behind mtp-repro (config, data, models, decoders, training, evaluation, results)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any

__version__ = "0.1.0"


def lazy_exports(package: str, where: Mapping[str, str]) -> Callable[[str], Any]:
    """A module-level `__getattr__` for `package` whose attributes import their module on first use (PEP 562), so
    that importing a package stays light: name -> the attribute of the submodule `where[name]`."""

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(import_module(f"{package}.{where[name]}"), name)

    return __getattr__

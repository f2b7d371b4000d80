"""The registered decoders' names, accepted parameters and backends without importing them: what the plan checks need
(`check_decoder`), so that `snakemake -n` and every Snakemake process start without torch (about 7 s of the
13 s a dry run took).

The catalog is read from the decoder classes once (`base.decoders()`) and kept in the user's cache directory
under a stamp of the source of every package that can define a decoder or its parameters (the `mtp_core`
package and each registered paper's), so that any edit to that code makes a new one; like Python's own bytecode
cache, a stale entry cannot be read. `base.decoder_class` (in the jobs, which load the classes anyway) checks a
label against the classes themselves, by the same rule (`base.check_params`).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..config.settings import cached_json
from .base import catalog_entry, check_params, decoders


@functools.cache
def _source_stamp() -> str:
    """A hash of every `.py` file of the packages that hold decoders: `mtp_core` and each registered paper's
    decoder modules' top-level package (found without importing the modules); once per process, as Python reads
    its modules once (a plan check asks the catalog some 60 times)."""
    from ..config import registry

    roots = {Path(__file__).resolve().parents[1]}
    for paper in registry.papers().values():
        for module in paper.decoders:
            spec = importlib.util.find_spec(module.split(".")[0])
            if spec is not None and spec.submodule_search_locations:
                roots.update(Path(p).resolve() for p in spec.submodule_search_locations)
    digest = hashlib.sha256()
    for root in sorted(roots):
        for path in sorted(root.rglob("*.py")):
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:20]


def catalog() -> dict[str, dict[str, tuple[str, ...]]]:
    """Every registered decoder's accepted parameters and backends by name (`base.catalog_entry`; module
    docstring)."""
    entries = cached_json("decoders", _source_stamp(), lambda: {n: catalog_entry(c) for n, c in decoders().items()})
    return {name: {k: tuple(v) for k, v in entry.items()} for name, entry in entries.items()}


def check_decoder(label: str, params: Mapping[str, Any]) -> str:
    """`base.check_params` against the catalog: the plan checks' question, answered without torch."""
    return check_params(label, params, catalog())


def decoder_names() -> list[str]:
    """Every registered decoder's name (from the catalog)."""
    return sorted(catalog())

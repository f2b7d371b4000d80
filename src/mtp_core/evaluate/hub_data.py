"""Run lm-eval's built-in tasks on local copies of their hub datasets.

lm-eval's tasks name their datasets in lm-eval's own YAMLs (`dataset_path: openai/gsm8k`, `SaylorTwift/bbh`, ...),
not in our config, and load them with `datasets.load_dataset(path=<hub id>, name=<config>, ...)`; so a run without
the hub (the paper config's rehearsal on `mtp_core.data.hub` / `models.hub` stand-ins, or an offline cluster holding copies of
the repos) cannot point them elsewhere through the config. `hub_datasets_from` does it for the duration of a block:
a `datasets.load_dataset` call whose path is one of the mapped hub ids reads the mapped local folder instead (a
folder in the repo's layout, with the card's `configs`: the same `name` and splits then resolve), cached by the
folder's content (`data.records.local_cache_dir`); every other call passes through unchanged.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from ..data.records import local_cache_dir


@contextmanager
def hub_datasets_from(folders: Mapping[str, str | os.PathLike]) -> Iterator[None]:
    """While active, `datasets.load_dataset(path=<hub id in folders>, ...)` loads `folders[<hub id>]`; the original
    function is restored on exit, also when the block raises."""
    import datasets

    original = datasets.load_dataset
    local = {hub_id: os.fspath(folder) for hub_id, folder in folders.items()}

    @functools.wraps(original)
    def load_dataset(path, *args, **kwargs):
        if path in local:
            path = local[path]
            kwargs.setdefault("cache_dir", local_cache_dir(path))  # not the stale cache of a same-named folder
        return original(path, *args, **kwargs)

    datasets.load_dataset = load_dataset
    try:
        yield
    finally:
        datasets.load_dataset = original

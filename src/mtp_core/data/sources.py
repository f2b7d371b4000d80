"""Local data sources, checked before any job: the first record of every local file or folder that a dataset or a
prompt set of the config reads must be one its loader accepts (the loader's own row validator), so that a file in
the wrong format or without a column stops the plan check with the config key, the file and the row, not a job
hours into a paper-scale run.

What is read: `.jsonl` (its first line), `.json` (the first item of its array, from the file's head), `.parquet`
(its first row), or a folder in a hub repo's layout, whose data file for the asked config and split is resolved by
`datasets.load_dataset_builder` (the resolution `datasets.load_dataset` makes). Hub ids are not read (nothing is
local), nor paths under `results/`, which rules write (the hub stand-ins among them, whose writers are tested).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..io import InputError, require_text_fields
from .metamathqa import METAMATHQA_FIELDS, check_gsm8k_row
from .prompts import normalise_prompt_row
from .sharegpt import check_turns

RULE_OUTPUTS = "results/"
HEAD_BYTES = 1 << 20  # a JSON array's first item is read from the file's first MiB
DATA_SUFFIXES = (".json", ".jsonl", ".parquet")


class SourceError(InputError):
    """A local data source its loader would refuse; the message names the config key, the file and the row."""


def _local(path: Any) -> bool:
    """A path to read here: it exists, or looks like a file or folder path rather than a hub id `org/name`; not
    under `results/` (rules write those)."""
    p = str(path)
    if p.startswith(RULE_OUTPUTS):
        return False
    looks_local = p.startswith(("/", "./", "../", "~")) or p.count("/") > 1 or p.endswith(DATA_SUFFIXES)
    return Path(p).exists() or looks_local


def _first_of_file(file: Path) -> dict:
    suffix = file.suffix
    if suffix == ".jsonl":
        with file.open(encoding="utf-8") as f:
            line = next((x for x in f if x.strip()), None)
        if line is None:
            raise ValueError("no rows")
        return json.loads(line)
    if suffix == ".json":
        with file.open(encoding="utf-8") as f:
            head = f.read(HEAD_BYTES)
        start = len(head) - len(head.lstrip())
        if head[start : start + 1] != "[":
            raise ValueError("expected a JSON array")
        i = start + 1
        while i < len(head) and head[i].isspace():
            i += 1
        return json.JSONDecoder().raw_decode(head, i)[0]
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        table = pq.ParquetFile(file).read_row_group(0)
        if table.num_rows == 0:
            raise ValueError("no rows")
        return table.slice(0, 1).to_pylist()[0]
    raise ValueError(f"not a data file this pipeline reads (.jsonl, .json, .parquet): {file.name}")


def _data_file(folder: Path, name: str | None, split: str) -> Path:
    import datasets

    builder = datasets.load_dataset_builder(str(folder), name)
    files = (builder.config.data_files or {}).get(split)
    if not files:
        raise ValueError(f"no split {split!r} (config {name!r})")
    return Path(str(files[0]))


def first_record(path: str | os.PathLike, name: str | None = None, split: str = "train") -> tuple[Path, dict]:
    """(the data file read, its first record) of a local file, or of `name`/`split` of a folder in hub layout."""
    p = Path(path)
    file = _data_file(p, name, split) if p.is_dir() else p
    return file, _first_of_file(file)


def check_source(key: str, path: str, validate: Callable[[dict], None], name: str | None = None, split: str = "train"):
    """Raise SourceError naming `key` when the first record of local `path` fails `validate` (module docstring)."""
    if not _local(path):
        return
    if not Path(path).exists():
        raise SourceError(f"{key}: {path}: no such file or folder (and not a hub id: org/name)")
    try:
        file, record = first_record(path, name, split)
    except Exception as e:  # unreadable: what the loader would fail on, said before any job
        raise SourceError(f"{key}: {path}: cannot read its first record ({type(e).__name__}: {e})") from None
    try:
        if not isinstance(record, dict):
            raise ValueError(f"a record must be an object, got {type(record).__name__}")
        validate(record)
    except ValueError as e:
        raise SourceError(f"{key}: {file}: row 1: {e}") from None


def _sources(config: dict) -> Iterator[tuple[str, str, Callable[[dict], None], str | None, str]]:
    """(key, path, row validator, config name, split) of every local source the config's datasets and prompt sets
    read, by kind (each validator is its loader's)."""
    for ds_name, ds in config["datasets"].items():
        key = f"datasets.{ds_name}"
        kind = ds["kind"]
        if kind == "metamathqa":
            yield f"{key}.path", ds["path"], require_text_fields(*METAMATHQA_FIELDS), None, "train"
            t = ds["test"]
            yield f"{key}.test.path", t["path"], check_gsm8k_row, t.get("name"), t.get("split", "test")
        elif kind == "sharegpt" and ds.get("path"):
            paths = [ds["path"]] if isinstance(ds["path"], str) else ds["path"]
            for i, p in enumerate(paths):
                yield f"{key}.path[{i}]", p, check_turns, None, ds.get("split", "train")
        elif kind == "pretrain_text" and ds.get("source") == "fineweb":
            yield f"{key}.path", ds["path"], require_text_fields("text"), ds.get("name"), "train"
    for ps_name, ps in config["prompt_sets"].items():
        if ps["source"] == "jsonl":
            yield f"prompt_sets.{ps_name}.path", ps["path"], normalise_prompt_row, None, "train"


def check_sources(config: dict) -> None:
    """Every local source of the config passes its loader's row check on its first record (module docstring). A
    dataset that skips bad rows (`on_bad_row: skip`) is only checked for being readable: its first row may be one it
    skips (its loader counts them in the read report)."""
    for key, path, validate, name, split in _sources(config):
        ds = config["datasets"].get(key.split(".")[1], {}) if key.startswith("datasets.") else {}
        skip = ds.get("on_bad_row", config.get("on_bad_row", "error")) == "skip"
        check_source(key, path, (lambda row: None) if skip else validate, name, split)

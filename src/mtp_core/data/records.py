"""Reading records from local JSONL / JSON-array files or the Hugging Face hub, with file-and-row errors.

Every source yields dicts through `mtp_core.io.validated`: a row that the validator rejects raises
`BadRowError` (file, 1-based row) or, with on_bad_row="skip", is counted in the `ReadReport` and logged.
For JSON arrays and hub datasets the row is the 1-based item index.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from ..io import BadRowError, ReadReport, read_jsonl, stable_hash, validated

log = logging.getLogger(__name__)
Validator = Callable[[dict], None]
_SEPARATOR = re.compile(r"[\s,]*")


def iter_json_array(path: str | os.PathLike, allow_truncated: bool = False) -> Iterator[Any]:
    """The items of a file holding one JSON array, decoded one at a time.

    An item that cannot be decoded raises BadRowError naming its 1-based index. A file cut off inside its
    last item (no closing `]`) raises the same error unless `allow_truncated`, in which case the complete
    items are yielded and the cut-off tail is logged as a warning.
    """
    text = Path(path).read_text(encoding="utf-8")
    decoder = json.JSONDecoder()
    i = _SEPARATOR.match(text).end()
    if text[i : i + 1] != "[":
        raise BadRowError(path, 1, "expected a JSON array")
    i = _SEPARATOR.match(text, i + 1).end()
    n = 0
    while text[i : i + 1] != "]":
        try:
            item, i = decoder.raw_decode(text, i)
        except json.JSONDecodeError as e:
            truncated = not text.rstrip().endswith("]")
            if truncated and allow_truncated:
                log.warning("%s: file ends inside item %d; read the %d complete items before it", path, n + 1, n)
                return
            reason = "file is cut off inside this item" if truncated else f"undecodable item ({e.msg})"
            raise BadRowError(path, n + 1, reason) from None
        n += 1
        yield item
        i = _SEPARATOR.match(text, i).end()
        if i >= len(text):
            if allow_truncated:
                log.warning("%s: file ends after item %d without closing the array", path, n)
                return
            raise BadRowError(path, n, "file ends without closing the JSON array")


def is_local_file(path: str | os.PathLike) -> bool:
    return str(path).endswith((".json", ".jsonl")) or Path(path).is_file()


def read_records(
    path: str,
    validate: Validator | None = None,
    on_bad_row: str = "error",
    report: ReadReport | None = None,
    *,
    name: str | None = None,
    split: str = "train",
    streaming: bool = False,
) -> Iterator[dict]:
    """Validated records of a local `.jsonl` file, a local `.json` array, or a hub dataset / local directory
    loaded with `datasets.load_dataset(path, name=name, split=split, streaming=streaming)`."""
    report = report if report is not None else ReadReport(str(path))
    if is_local_file(path):
        if not Path(path).exists():
            raise FileNotFoundError(f"{path}: no such file")
        if str(path).endswith(".jsonl"):
            return read_jsonl(path, validate, on_bad_row, report)
        return validated(iter_json_array(path), path, validate, on_bad_row, report)
    return validated(load_hf(path, name=name, split=split, streaming=streaming), path, validate, on_bad_row, report)


class DatasetLoadError(RuntimeError):
    """`datasets.load_dataset` failed; the message names the dataset, config and split."""


def local_cache_dir(path: str | os.PathLike) -> str | None:
    """For a local dataset directory, a `datasets` cache directory of its own, named by the directory's path and
    its files' names, sizes and modification times; None for a hub id. datasets 5.x names the cache of a local
    directory by the directory's base name and config alone, so a rewritten directory (or another one of the same
    name, such as a hub stand-in written again with other rows) would load the rows cached the first time."""
    folder = Path(path)
    if not folder.is_dir():
        return None
    import datasets

    files = sorted(
        (str(p.relative_to(folder)), st.st_size, st.st_mtime_ns)
        for p in folder.rglob("*")
        if p.is_file()
        for st in [p.stat()]
    )
    return str(Path(datasets.config.HF_DATASETS_CACHE) / "local" / stable_hash([str(folder.resolve()), files], 16))


def load_hf(path: str, name: str | None, split: str, streaming: bool) -> Iterable[dict]:
    """`datasets.load_dataset` of a hub id or a local directory (cached by its content: `local_cache_dir`), with an
    error that names what was asked for."""
    import datasets

    log.info("loading %s (name=%s, split=%s, streaming=%s) with datasets", path, name, split, streaming)
    try:
        return datasets.load_dataset(path, name=name, split=split, streaming=streaming, cache_dir=local_cache_dir(path))
    except Exception as e:
        hint = " (a local directory usually needs name: null)" if Path(path).is_dir() and name else ""
        raise DatasetLoadError(f"cannot load dataset {path!r} (name={name!r}, split={split!r}){hint}: {e}") from e

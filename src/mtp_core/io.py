"""File I/O shared by every step: atomic writes, robust JSONL reading with file/row errors, hashing; and
`lazy_exports`, with which a package's names import their modules on first use."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import import_module
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


class InputError(ValueError):
    """Bad input a user can fix (a file, a row, a config key, a name, a parameter); the message says which. The
    command line prints it as one line and exits non-zero (`mtp_core.cli`)."""


class BadRowError(InputError):
    """A bad input row; the message names the file and the 1-based row number."""

    def __init__(self, path: str | os.PathLike, row: int, reason: str):
        super().__init__(f"{path}: row {row}: {reason}")
        self.path, self.row, self.reason = str(path), row, reason


def _umask() -> int:
    """The process's umask, read without changing it (Linux), else by setting it back at once."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _open_mode(path: str | os.PathLike, directory: bool = False) -> None:
    """Give `path` the mode `open` / `mkdir` would have (`mkstemp` and `mkdtemp` make private ones, which the other
    members of a lab sharing `results/` could not read)."""
    os.chmod(path, (0o777 if directory else 0o666) & ~_umask())


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path next to `path`; rename it onto `path` only if the block succeeds (with the mode a
    plain write would give it)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        _open_mode(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


@contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield an empty temporary directory next to `path`; it replaces `path` only if the block succeeds (with the
    mode a plain `mkdir` would give it)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        yield tmp
        _open_mode(tmp, directory=True)
        if path.exists():
            shutil.rmtree(path)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False, default=_json_default) + "\n")


def atomic_write_jsonl(path: str | os.PathLike, rows: Iterable[dict]) -> int:
    """Write rows as JSON lines atomically; returns the number of rows written."""
    n = 0
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False, default=_json_default) + "\n")
            n += 1
    return n


def _json_default(o: Any) -> Any:
    if hasattr(o, "tolist"):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


@dataclass
class ReadReport:
    """What a tolerant read skipped: counts per reason and the first few examples (file:row: reason)."""

    path: str
    rows_read: int = 0
    skipped: int = 0
    examples: list[str] = field(default_factory=list)

    def add_skip(self, err: BadRowError) -> None:
        self.skipped += 1
        if len(self.examples) < 10:
            self.examples.append(str(err))

    def as_dict(self) -> dict:
        return {"path": self.path, "rows_read": self.rows_read, "skipped": self.skipped, "examples": self.examples}


def validated(
    items: Iterable[Any],
    path: str | os.PathLike,
    validate: Callable[[dict], None] | None = None,
    on_bad_row: str = "error",
    report: ReadReport | None = None,
    numbered: bool = False,
) -> Iterator[dict]:
    """Yield the items that are JSON objects and pass `validate` (which raises ValueError).

    Rows are numbered from 1 (an item of a JSON array, a record of a dataset), or come as (row, item) pairs
    with `numbered=True` (lines of a JSONL file). An item that is a `BadRowError` (an undecodable line), not
    a dict, or rejected by `validate` raises BadRowError naming file and row, or with on_bad_row="skip" is
    counted in `report` and logged.
    """
    if on_bad_row not in ("error", "skip"):
        raise ValueError(f"on_bad_row must be 'error' or 'skip', got {on_bad_row!r}")
    report = report if report is not None else ReadReport(str(path))
    pairs = items if numbered else enumerate(items, start=1)
    for row_no, item in pairs:
        try:
            if isinstance(item, BadRowError):
                raise item
            if not isinstance(item, dict):
                raise BadRowError(path, row_no, f"expected a JSON object, got {type(item).__name__}")
            if validate is not None:
                try:
                    validate(item)
                except ValueError as e:
                    raise BadRowError(path, row_no, str(e)) from None
        except BadRowError as e:
            if on_bad_row == "error":
                raise
            report.add_skip(e)
            log.warning("skipping %s", e)
            continue
        report.rows_read += 1
        yield item


def _jsonl_lines(path: str | os.PathLike) -> Iterator[tuple[int, Any]]:
    """(line number, decoded object) of a JSONL file; blank lines are dropped and an undecodable line
    gives a BadRowError in place of the object."""
    with open(path, "rb") as f:
        for row_no, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            try:
                yield row_no, json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as e:
                yield row_no, BadRowError(path, row_no, f"undecodable line ({e})")


def read_json(path: str | os.PathLike) -> Any:
    """The JSON object of a file (UTF-8)."""
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def read_jsonl(
    path: str | os.PathLike,
    validate: Callable[[dict], None] | None = None,
    on_bad_row: str = "error",
    report: ReadReport | None = None,
) -> Iterator[dict]:
    """Yield the JSON objects of a JSONL file, checked by `validated` (rows are line numbers)."""
    return validated(_jsonl_lines(path), path, validate, on_bad_row, report, numbered=True)


def require_text_fields(*fields: str) -> Callable[[dict], None]:
    """A row validator: each field must be present and a non-empty string."""

    def check(row: dict) -> None:
        for name in fields:
            if name not in row or row[name] is None:
                raise ValueError(f"missing field {name!r}")
            if not isinstance(row[name], str):
                raise ValueError(f"field {name!r} must be a string, got {type(row[name]).__name__}")
            if not row[name].strip():
                raise ValueError(f"field {name!r} is empty")

    return check


def stable_hash(obj: Any, length: int = 12) -> str:
    """Hash of a JSON-serialisable object, independent of dict order."""
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=_json_default)
    return hashlib.sha256(blob.encode()).hexdigest()[:length]


def log_to_file(path: str | os.PathLike) -> None:
    """Send a workflow script's stderr (warnings, progress bars) and Python logging to its rule's log."""
    sys.stderr = open(path, "w", buffering=1)  # noqa: SIM115  (lives as long as the script)
    logging.basicConfig(
        stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s", force=True
    )


def lazy_exports(package: str, where: Mapping[str, str]) -> Callable[[str], Any]:
    """A module-level `__getattr__` for `package` whose attributes import their module on first use (PEP 562), so
    that importing a package stays light: name -> the attribute of the submodule `where[name]`."""

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(import_module(f"{package}.{where[name]}"), name)

    return __getattr__

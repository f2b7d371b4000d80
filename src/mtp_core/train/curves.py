"""The training-curves CSV: one row per logged step, appended and flushed as training goes.

Columns are fixed when the file is created (the loop's own columns, then the step function's declared
metrics); a metric missing in a row is left empty. On resume the rows after the resumed step (written by
the interrupted run after its last checkpoint) are dropped first, atomically, so a resumed run's file equals
an uninterrupted one's (the wall-clock columns aside).
"""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..io import atomic_path


def _fmt(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(v) if math.isfinite(v) else str(v)
    return str(v)


class CurveWriter:
    """Append rows to `path` (CSV with a header); `resume_step` truncates rows with step > resume_step."""

    def __init__(self, path: str | os.PathLike, columns: Sequence[str], resume_step: int | None = None):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if resume_step is not None and self.path.exists():
            with open(self.path, newline="", encoding="utf-8") as f:
                reader = csv.reader(f)
                header = next(reader, None)
                rows = [r for r in reader if r and int(r[0]) <= resume_step]
            if header is None:
                header = list(columns)
            with atomic_path(self.path) as tmp, open(tmp, "w", newline="", encoding="utf-8") as f:
                w = csv.writer(f)
                w.writerow(header)
                w.writerows(rows)
            self.columns = list(header)
        else:
            self.columns = list(columns)
            if self.columns[0] != "step":
                raise ValueError("the first curves column must be 'step'")
            with atomic_path(self.path) as tmp, open(tmp, "w", newline="", encoding="utf-8") as f:
                csv.writer(f).writerow(self.columns)
        self._f = open(self.path, "a", newline="", encoding="utf-8")  # noqa: SIM115 (closed in close())
        self._w = csv.writer(self._f)

    def write(self, row: dict[str, Any]) -> None:
        self._w.writerow([_fmt(row.get(c)) for c in self.columns])
        self._f.flush()

    def close(self) -> None:
        if not self._f.closed:
            self._f.close()

    def __enter__(self) -> CurveWriter:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def read_curves(path: str | os.PathLike) -> list[dict[str, str]]:
    """The rows of a curves CSV as dicts of strings."""
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def curve_means(path: str | os.PathLike, columns: Sequence[str]) -> dict[str, float | None]:
    """The mean over the run's steps of each of `columns` (steps where a metric is empty are skipped; None when
    no step has it): the run-level numbers of a training record."""
    rows = read_curves(path) if Path(path).exists() else []
    out: dict[str, float | None] = {}
    for c in columns:
        vals = [float(r[c]) for r in rows if r.get(c) not in (None, "")]
        out[c] = sum(vals) / len(vals) if vals else None
    return out

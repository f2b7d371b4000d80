"""Tables: raw numbers for CSV, `mean ± err` cells for markdown, and the foundation's two tables."""

from __future__ import annotations

import math
import os
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from ..io import atomic_write_text

MISSING = "-"
PRIMARY_METRIC = "exact_match,flexible-extract"
REFERENCE_DECODERS = ("greedy", "hf-greedy")


@dataclass
class Table:
    """`data` holds raw numbers (the CSV). In markdown, each column of `pm` (mean column -> error column) becomes
    one `mean ± err` cell named after the mean column; floats show `digits[col]` (else `default_digits`) decimals."""

    data: pd.DataFrame
    pm: dict[str, str] = field(default_factory=dict)
    digits: dict[str, int] = field(default_factory=dict)
    default_digits: int = 3

    def display(self) -> pd.DataFrame:
        """The formatted (all-string) frame written as markdown."""
        errs = set(self.pm.values())
        out: dict[str, list[str]] = {}
        for col in self.data.columns:
            if col in errs:
                continue
            d, vals = self.digits.get(col, self.default_digits), self.data[col]
            if col in self.pm:
                out[col] = [format_pm(m, e, d) for m, e in zip(vals, self.data[self.pm[col]])]
            elif pd.api.types.is_float_dtype(vals):
                out[col] = [format_pm(m, None, d) for m in vals]
            else:
                out[col] = [MISSING if _missing(v) else str(v) for v in vals]
        return pd.DataFrame(out, columns=list(out))

    def rename(self, columns: dict[str, str]) -> Table:
        """A copy with columns renamed everywhere (data, pm, digits)."""
        r = lambda c: columns.get(c, c)  # noqa: E731
        return Table(
            self.data.rename(columns=columns),
            {r(m): r(e) for m, e in self.pm.items()},
            {r(c): d for c, d in self.digits.items()},
            self.default_digits,
        )


def format_pm(mean: Any, err: Any = None, digits: int = 3) -> str:
    """`0.512 ± 0.031`; the mean alone when `err` is None/NaN; `-` when the mean is missing."""
    if _missing(mean):
        return MISSING
    s = f"{float(mean):.{digits}f}"
    return s if _missing(err) else f"{s} ± {float(err):.{digits}f}"


def pivot_pm(
    frame: pd.DataFrame,
    index: str | Sequence[str],
    columns: str,
    value: str | Sequence[str],
    err: str | None | Sequence[str | None] = None,
    digits: int = 3,
    row_order: Sequence[Hashable] | None = None,
    column_order: Sequence[Hashable] | None = None,
) -> Table:
    """Long `frame` -> wide Table: one row per `index` key, and for each value `c` of `columns` and each
    (`value`, `err`) pair the columns `c/<value>` and `c/<err>` (shown as one `mean ± err` cell).

    Rows follow `row_order` (index keys, tuples for several index columns), then any other keys in order of
    first appearance; keys in `row_order` that do not occur are skipped. Columns likewise with `column_order`.
    Two rows with the same (index, columns) key raise ValueError.
    """
    idx = [index] if isinstance(index, str) else list(index)
    vals = [value] if isinstance(value, str) else list(value)
    errs = [err] if isinstance(value, str) else list(err) if err is not None else [None] * len(vals)
    if len(errs) != len(vals):
        raise ValueError(f"pivot_pm: {len(vals)} value columns but {len(errs)} error columns")
    cells: dict[tuple, dict] = {}
    for r in frame.to_dict("records"):
        key = (tuple(r[i] for i in idx), r[columns])
        if key in cells:
            raise ValueError(f"pivot_pm: several rows for {dict(zip(idx, key[0]))}, {columns}={key[1]!r}")
        cells[key] = r
    row_keys = _ordered([k for k, _ in cells], [k if isinstance(k, tuple) else (k,) for k in row_order or []])
    col_keys = _ordered([c for _, c in cells], list(column_order or []))
    pm, out = {}, pd.DataFrame([dict(zip(idx, k)) for k in row_keys], columns=idx)
    for c in col_keys:
        for v, e in zip(vals, errs):
            out[f"{c}/{v}"] = [cells[(k, c)][v] if (k, c) in cells else math.nan for k in row_keys]
            if e is not None:
                out[f"{c}/{e}"] = [cells[(k, c)][e] if (k, c) in cells else math.nan for k in row_keys]
                pm[f"{c}/{v}"] = f"{c}/{e}"
    return Table(out, pm, default_digits=digits)


def write_table(table: Table | pd.DataFrame, stem: str | os.PathLike) -> tuple[Path, Path]:
    """Write `<stem>.csv` (raw numbers) and `<stem>.md` (formatted cells), each atomically."""
    table = table if isinstance(table, Table) else Table(table)
    csv, md = Path(f"{stem}.csv"), Path(f"{stem}.md")
    atomic_write_text(csv, table.data.to_csv(index=False, lineterminator="\n"))
    shown = table.display()
    text = shown.to_markdown(index=False, disable_numparse=True) if len(shown.columns) else ""
    atomic_write_text(md, text + "\n")
    return csv, md


def write_table_files(table: Table | pd.DataFrame, csv: str | os.PathLike, md: str | os.PathLike) -> None:
    """`write_table` to a rule's two outputs, which must be `<stem>.csv` and `<stem>.md`."""
    if not (str(csv).endswith(".csv") and str(md) == str(csv)[:-4] + ".md"):
        raise ValueError(f"table outputs must be <stem>.csv and <stem>.md, got {str(csv)!r} and {str(md)!r}")
    write_table(table, str(csv)[:-4])


# tokens per forward as the tables show it: pooled over the prompts (all new tokens over all forwards: tokens per
# model call, Spec-Bench's step-weighted mean accepted tokens) ± its standard error, not the mean of per-prompt ratios
POOLED_TPF = {
    "tokens_per_forward_pooled": "tokens_per_forward",
    "tokens_per_forward_pooled_se": "tokens_per_forward_se",
}


def decoding_table(frame: pd.DataFrame, references: Sequence[str] = REFERENCE_DECODERS) -> Table:
    """One row per (model, run, prompt set, decoder): speed and acceptance, and `speedup_vs_<ref>` = tokens/s over
    that of decoder `ref` in the same (model, run, prompt set) (NaN where it is absent). Rows are grouped by
    (model, run, prompt set) in order of first appearance, decoders in input order within a group."""
    group = ["model", "run", "task"]
    frame = _group_rows(frame, group)
    data = frame[
        [
            *group,
            "decoder",
            "params_str",
            "n",
            "tokens_per_s",
            "tokens_per_forward_pooled",
            "tokens_per_forward_pooled_se",
            "forward_passes",
            "new_tokens_mean",
        ]
    ]
    data = data.rename(columns=POOLED_TPF | {"task": "prompt_set", "params_str": "params"}).astype(
        {"n": "Int64", "forward_passes": "Int64"}
    )
    keys = list(zip(*(frame[g] for g in group)))
    for ref in references:
        speed: dict[tuple, float] = {}
        for key, dec, tps in zip(keys, frame["decoder"], frame["tokens_per_s"]):
            if dec == ref:
                if key in speed:
                    raise ValueError(f"decoding_table: several {ref!r} results for (model, run, prompt set) {key}")
                speed[key] = tps
        data[f"speedup_vs_{ref.replace('-', '_')}"] = [
            _ratio(t, speed.get(k, math.nan)) for k, t in zip(keys, frame["tokens_per_s"])
        ]
    return Table(
        data.reset_index(drop=True),
        {"tokens_per_forward": "tokens_per_forward_se"},
        {"tokens_per_s": 1, "new_tokens_mean": 1, **{c: 2 for c in data if c.startswith("speedup_")}},
        2,
    )


def evaluation_table(metrics: pd.DataFrame, frame: pd.DataFrame, digits: int = 3) -> Table:
    """One row per (run, decoder, params); per task the primary metric (`exact_match,flexible-extract` if the
    task has it, else its first metric) as `<task>/<metric key>` ± `_stderr`, and `<task>/effective_k` ± `_std`."""
    primary = {
        t: PRIMARY_METRIC if PRIMARY_METRIC in set(g["key"]) else g["key"].iloc[0]
        for t, g in metrics.groupby("task", sort=False)
    }
    chosen = metrics[metrics["key"] == metrics["task"].map(primary)]
    long = chosen[["path", "value", "stderr"]].merge(frame.drop(columns="params"), on="path", validate="1:1")
    long = long.rename(columns={"params_str": "params"})
    table = pivot_pm(
        long, ["run", "decoder", "params"], "task", ["value", "effective_k"], ["stderr", "effective_k_std"], digits
    )
    names = {}
    for t, k in primary.items():
        names |= {f"{t}/value": f"{t}/{k}", f"{t}/stderr": f"{t}/{k}_stderr"}
    table.digits |= {f"{t}/effective_k": 2 for t in primary}
    return table.rename(names)


def _group_rows(frame: pd.DataFrame, group: list[str]) -> pd.DataFrame:
    """Rows stably sorted by the first appearance of their `group` key."""
    keys = list(zip(*(frame[g] for g in group)))
    rank = {k: i for i, k in reversed(list(enumerate(keys)))}
    order = sorted(range(len(keys)), key=lambda i: rank[keys[i]])
    return frame.iloc[order]


def _ordered(seen: list, preferred: list) -> list:
    present, first = dict.fromkeys(seen), dict.fromkeys(preferred)
    return [k for k in first if k in present] + [k for k in present if k not in first]


def _ratio(a: float, b: float) -> float:
    return a / b if b and not math.isnan(b) else math.nan


def _missing(v: Any) -> bool:
    return v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v))

"""Result JSONs (see `mtp_core.results.write`) into pandas frames: one flat row per file, plus long-format metrics
and per-category decode statistics."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd

STAT_COLUMNS = (
    "tokens_per_forward",
    "tokens_per_forward_std",
    "tokens_per_forward_pooled",
    "tokens_per_forward_pooled_se",
    "effective_k",
    "effective_k_std",
    "new_tokens_mean",
    "new_tokens_std",
    "new_tokens_total",
    "forward_passes",
    "tokens_per_s",
    "wall_s",
    "compile_s",
    "identical_fraction",
    "speedup_vs_greedy",
    "modeled_speedup_vs_greedy",
)
RESULT_COLUMNS = (
    "path",
    "kind",
    "paper",
    "run",
    "model",
    "task",
    "decoder",
    "params_str",
    "label",
    "lossless",
    "n",
    *STAT_COLUMNS,
    "scale",
    "config_hash",
    "created",
    "params",
    "settings",
    "metrics",
    "per_category",
)
KEY_COLUMNS = ("path", "paper", "run", "model", "task", "decoder", "params_str", "label")


class ResultFileError(ValueError):
    """A result JSON that cannot be read; the message names the file (and the field)."""

    def __init__(self, path: str | os.PathLike, reason: str):
        super().__init__(f"{path}: {reason}")
        self.path, self.reason = str(path), reason


def format_params(params: Mapping[str, Any]) -> str:
    """Decoder parameters as a compact string in recorded order: `k=3,tau=0.9` ('' when none)."""

    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:g}"
        if isinstance(v, (dict, list)):
            return json.dumps(v, separators=(",", ":"), sort_keys=True)
        return str(v)

    return ",".join(f"{k}={fmt(v)}" for k, v in params.items())


def load_results(paths: Iterable[str | os.PathLike]) -> pd.DataFrame:
    """One row per result JSON (columns `RESULT_COLUMNS`, in the order of `paths`).

    Missing statistics become NaN; an unreadable file or a missing/ill-typed field raises ResultFileError.
    `params`, `settings`, `metrics` and `per_category` keep the recorded dicts; `label` is the decoder name,
    followed by its parameters in parentheses when it has any.
    """
    rows = [_flatten(str(p), _read(p)) for p in paths]
    return pd.DataFrame(rows, columns=list(RESULT_COLUMNS))


def metrics_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """Long format: one row per (result, metric key); the key `metric,filter` is split (filter 'none' if absent)."""
    rows = []
    for rec in frame.to_dict("records"):
        for key, m in rec["metrics"].items():
            metric, _, filt = key.partition(",")
            rows.append(
                {
                    **{c: rec[c] for c in KEY_COLUMNS},
                    "key": key,
                    "metric": metric,
                    "filter": filt or "none",
                    "value": _num(m.get("value")),
                    "stderr": _num(m.get("stderr")),
                }
            )
    return pd.DataFrame(rows, columns=[*KEY_COLUMNS, "key", "metric", "filter", "value", "stderr"])


def category_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """Long format: one row per (result, prompt category) with the category's decode statistics."""
    rows = []
    for rec in frame.to_dict("records"):
        for cat, stats in rec["per_category"].items():
            rows.append({**{c: rec[c] for c in KEY_COLUMNS}, "category": cat, **_stats(rec["path"], stats)})
    return pd.DataFrame(rows, columns=[*KEY_COLUMNS, "category", *STAT_COLUMNS])


def _read(path: str | os.PathLike) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            obj = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ResultFileError(path, f"cannot read result JSON ({e})") from None
    if not isinstance(obj, dict):
        raise ResultFileError(path, f"expected a JSON object, got {type(obj).__name__}")
    return obj


def _flatten(path: str, r: dict) -> dict:
    for name in ("kind", "run", "model", "task"):
        _field(path, r, name, str)
    dec = _field(path, r, "decoder", dict)
    name = _field(path, dec, "name", str, "decoder.name")
    params = dec.get("params") or {}
    if not isinstance(params, dict):
        raise ResultFileError(path, f"field 'decoder.params' must be an object, got {type(params).__name__}")
    metrics = r.get("metrics") or {}
    for key, m in metrics.items():
        if not isinstance(m, dict) or "value" not in m:
            raise ResultFileError(path, f"metrics[{key!r}] must be an object with a 'value'")
        try:
            _num(m["value"]), _num(m.get("stderr"))
        except TypeError as e:
            raise ResultFileError(path, f"metrics[{key!r}]: {e}") from None
    per_category = r.get("per_category") or {}
    for cat, stats in per_category.items():
        _stats(path, stats, f"per_category[{cat!r}]")
    params_str = format_params(params)
    return {
        "path": path,
        "kind": r["kind"],
        "paper": r.get("paper"),
        "run": r["run"],
        "model": r["model"],
        "task": r["task"],
        "decoder": name,
        "params_str": params_str,
        "label": f"{name} ({params_str})" if params_str else name,
        "lossless": dec.get("lossless"),
        "n": _field(path, r, "n", int),
        **_stats(path, _field(path, r, "decode_stats", dict)),
        "scale": r.get("scale"),
        "config_hash": r.get("config_hash"),
        "created": r.get("created"),
        "params": params,
        "settings": r.get("settings") or {},
        "metrics": metrics,
        "per_category": per_category,
    }


def _field(path: str, obj: dict, name: str, typ: type, shown: str | None = None) -> Any:
    if obj.get(name) is None:
        raise ResultFileError(path, f"missing field {shown or name!r}")
    if not isinstance(obj[name], typ) or isinstance(obj[name], bool):
        raise ResultFileError(path, f"field {shown or name!r} must be {typ.__name__}, got {type(obj[name]).__name__}")
    return obj[name]


def _stats(path: str, s: Any, where: str = "decode_stats") -> dict[str, float]:
    """decode_stats dict -> the flat `STAT_COLUMNS` (NaN where absent)."""
    if not isinstance(s, dict):
        raise ResultFileError(path, f"{where} must be an object, got {type(s).__name__}")

    def sub(name: str) -> dict:
        v = s.get(name) or {}
        if not isinstance(v, dict):
            raise ResultFileError(path, f"{where}.{name} must be an object, got {type(v).__name__}")
        return v

    tpf, ek, new = sub("tokens_per_forward"), sub("effective_k"), sub("new_tokens")
    try:
        return {
            "tokens_per_forward": _num(tpf.get("mean")),
            "tokens_per_forward_std": _num(tpf.get("std")),
            "tokens_per_forward_pooled": pooled_tokens_per_forward(s),
            "tokens_per_forward_pooled_se": _num(tpf.get("pooled_se")),
            "effective_k": _num(ek.get("mean")),
            "effective_k_std": _num(ek.get("std")),
            "new_tokens_mean": _num(new.get("mean")),
            "new_tokens_std": _num(new.get("std")),
            "new_tokens_total": _num(new.get("total")),
            "forward_passes": _num(s.get("forward_passes")),
            "tokens_per_s": _num(s.get("tokens_per_s")),
            "wall_s": _num(s.get("wall_s")),
            "compile_s": _num(s.get("compile_s")),
            "identical_fraction": _num(s.get("identical_fraction")),
            "speedup_vs_greedy": _num(s.get("speedup_vs_greedy")),
            "modeled_speedup_vs_greedy": _num(s.get("modeled_speedup_vs_greedy")),
        }
    except (TypeError, ValueError) as e:
        raise ResultFileError(path, f"{where}: non-numeric statistic ({e})") from None


def pooled_tokens_per_forward(stats: dict) -> float:
    """Tokens per forward pooled over a record's prompts (`decode_stats`' `tokens_per_forward.pooled`); records
    written before that figure have its parts: all new tokens over all forward passes (NaN without them)."""
    tpf = stats.get("tokens_per_forward") or {}
    if "pooled" in tpf:
        return _num(tpf["pooled"])
    total, forwards = _num((stats.get("new_tokens") or {}).get("total")), _num(stats.get("forward_passes"))
    return total / forwards if forwards > 0 else math.nan


def _num(v: Any) -> float:
    """A JSON number (or null) as float; null -> NaN."""
    if v is None:
        return math.nan
    if isinstance(v, (bool, str)):
        raise TypeError(f"expected a number, got {v!r}")
    return float(v)

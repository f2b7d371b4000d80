"""The result record every decoding and evaluation step writes, and the decode statistics in it.

One JSON per (paper, run, task or prompt set, decoder) under `results/decode/...`, with a `.samples.jsonl`
beside it holding the per-sample records. Schema (`RESULT_VERSION` 1):

    kind          "eval" (lm-eval task, has metrics) | "decode" (prompt set, speed/acceptance only)
    paper         "base" for the foundation runs, "p1".."p5" for paper runs
    run, model    the run (trained student or base model) and the declared base model name
    task          lm-eval task name or prompt-set name
    decoder       {"name", "lossless", "params"}
    n             number of samples
    metrics       {"<metric>,<filter>": {"value", "stderr"}}  (eval only; stderr may be null)
    decode_stats  {"tokens_per_forward": {mean, std, pooled, pooled_se}, "effective_k": {mean, std},
                   "new_tokens": {mean, std, total}, "forward_passes": total, "tokens_per_s", "wall_s",
                   and from the bench protocol "compile_s" (seconds spent compiling, never in "wall_s")}
    per_category  {category: decode_stats}  (decode only, when prompts carry categories)
    settings      max_new_tokens, batch_size, chat template, limit, ... as run
    scale, config_hash, versions, created
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ..decoding.base import GenerationResult
from ..io import atomic_write_json, atomic_write_jsonl

RESULT_VERSION = 1


def mean_std(values: Sequence[float]) -> dict[str, float | None]:
    """Mean and sample standard deviation (n-1); std is None for fewer than two values."""
    if len(values) == 0:
        return {"mean": None, "std": None}
    arr = np.asarray(values, dtype=float)
    return {"mean": float(arr.mean()), "std": float(arr.std(ddof=1)) if len(arr) > 1 else None}


def mean_stderr(values: Sequence[float | None]) -> tuple[float | None, float | None]:
    """Mean and standard error (sample std / sqrt n) of the values that are neither None nor NaN; (None, None)
    without any, a None error for one."""
    known = [x for x in values if x is not None and not math.isnan(x)]
    stats = mean_std(known)
    return stats["mean"], stats["std"] / math.sqrt(len(known)) if stats["std"] is not None else None


def pooled_ratio(num: Sequence[float], den: Sequence[float]) -> dict[str, float | None]:
    """Σ num / Σ den over the samples, with its standard error (the ratio estimator's linearisation, each sample
    one cluster: sqrt(n / (n - 1) · Σ (num_i - ratio · den_i)²) / Σ den); None where it is undefined."""
    total = float(sum(den))
    if len(num) == 0 or total <= 0:
        return {"pooled": None, "pooled_se": None}
    ratio = float(sum(num)) / total
    if len(num) < 2:
        return {"pooled": ratio, "pooled_se": None}
    resid = np.asarray(num, dtype=float) - ratio * np.asarray(den, dtype=float)
    return {"pooled": ratio, "pooled_se": math.sqrt(len(num) / (len(num) - 1) * float(resid @ resid)) / total}


def effective_k(accepted: Sequence[int], answer_tokens: int) -> float:
    """Paper 1's effective k of one sample: mean accepted tokens per step over the steps inside the answer.

    `answer_tokens` is the length of the stop-truncated answer in tokens. Steps whose cumulative accepted
    count stays within it are kept (searchsorted, side='right', as the official evaluation script does); the
    first step is always kept so that a one-step answer has a defined value.
    """
    if not accepted:
        return float("nan")
    cum = np.cumsum(accepted)
    keep = max(1, int(np.searchsorted(cum, answer_tokens, side="right")))
    return float(np.mean(accepted[:keep]))


def answer_token_count(tokenizer: Any, tokens: Sequence[int], answer_text: str) -> int:
    """How many of `tokens` the stop-truncated `answer_text` spans: the longest prefix whose decoded text
    is no longer than the answer (binary search; decoding is monotone in length). Trailing special tokens
    (the EOS) are not counted, as the official script matches against the tokenised response, and neither are
    the tokens of a whitespace stop string (BBH's "\n\n"): lengths are compared with the whitespace kept."""
    tokens = list(tokens)
    special = set(tokenizer.all_special_ids)
    while tokens and tokens[-1] in special:  # a closing EOS is not part of the answer text
        tokens.pop()
    full = tokenizer.decode(tokens, skip_special_tokens=True)
    if answer_text == full:
        return len(tokens)
    lo, hi = 0, len(tokens)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        text = tokenizer.decode(tokens[:mid], skip_special_tokens=True)
        if len(text) <= len(answer_text):
            lo = mid
        else:
            hi = mid - 1
    return lo


def decode_stats(gens: Sequence[GenerationResult], answer_tokens: Sequence[int] | None = None) -> dict:
    """Aggregate statistics of generations decoded together.

    Tokens per forward: the mean over samples of each one's ratio (± std across samples), and pooled, all new
    tokens over all forward passes (± its standard error: `pooled_ratio`), the tokens per model call.
    Tokens/s divides all new tokens by the summed wall time of the distinct batches they were decoded in
    (rows of one batch share their batch's times). `answer_tokens` (per sample) enables effective k; without
    it, effective k uses the full generation.
    """
    if answer_tokens is None:
        answer_tokens = [len(g.tokens) for g in gens]
    new = [len(g.tokens) for g in gens]
    wall = _batch_wall(gens)
    return {
        "tokens_per_forward": {
            **mean_std([g.tokens_per_forward for g in gens]),
            **pooled_ratio(new, [g.forward_passes for g in gens]),
        },
        "effective_k": mean_std([effective_k(g.accepted, a) for g, a in zip(gens, answer_tokens)]),
        "new_tokens": {**mean_std(new), "total": int(sum(new))},
        "forward_passes": int(sum(g.forward_passes for g in gens)),
        "tokens_per_s": (sum(new) / wall) if wall > 0 else None,
        "wall_s": wall,
    }


def _batch_wall(gens: Iterable[GenerationResult]) -> float:
    seen: set[tuple[float, float]] = set()
    total = 0.0
    for g in gens:
        key = (g.prefill_s, g.decode_s)
        if key not in seen:
            seen.add(key)
            total += g.prefill_s + g.decode_s
    return total


def sample_record(g: GenerationResult, **fields: Any) -> dict:
    """Per-sample line of `.samples.jsonl`: caller fields (id, category, text, ...) plus the generation (and the
    decoder's per-generation `extra`, when it has any: e.g. paper 4's layers touched and measured PLT)."""
    rec = dict(fields)
    rec.update(
        new_tokens=len(g.tokens),
        forward_passes=g.forward_passes,
        tokens_per_forward=g.tokens_per_forward,
        accepted=g.accepted,
        stop_reason=g.stop_reason,
        prompt_tokens=g.prompt_tokens,
        tokens=g.tokens,
    )
    if g.extra:
        rec["extra"] = g.extra
    return rec


def versions() -> dict[str, str]:
    import importlib.metadata as md

    out = {}
    for pkg in ("mtp-repro", "torch", "transformers", "lm_eval", "snakemake"):
        with contextlib.suppress(md.PackageNotFoundError):
            out[pkg] = md.version(pkg)
    return out


def make_result(
    *,
    kind: str,
    paper: str,
    run: str,
    model: str,
    task: str,
    decoder: dict,
    n: int,
    decode_stats: dict,
    settings: dict,
    scale: str,
    config_hash: str,
    metrics: dict | None = None,
    per_category: dict | None = None,
) -> dict:
    if kind not in ("eval", "decode"):
        raise ValueError(f"kind must be 'eval' or 'decode', got {kind!r}")
    return {
        "result_version": RESULT_VERSION,
        "kind": kind,
        "paper": paper,
        "run": run,
        "model": model,
        "task": task,
        "decoder": decoder,
        "n": n,
        "metrics": metrics or {},
        "decode_stats": decode_stats,
        "per_category": per_category or {},
        "settings": settings,
        "scale": scale,
        "config_hash": config_hash,
        "versions": versions(),
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }


def write_result(path: str, result: dict, samples: Iterable[dict] | None = None) -> None:
    """Write the result JSON and, if given, `<path without .json>.samples.jsonl`, both atomically."""
    if samples is not None:
        atomic_write_jsonl(samples_path(path), samples)
    atomic_write_json(path, _finite(result))


def samples_path(result_path: str) -> str:
    return (
        result_path[: -len(".json")] + ".samples.jsonl"
        if result_path.endswith(".json")
        else result_path + ".samples.jsonl"
    )


def _finite(obj: Any) -> Any:
    """Replace NaN/inf by None so the JSON stays standard."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    return obj

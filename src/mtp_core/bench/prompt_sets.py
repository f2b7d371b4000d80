"""Decode a prompt set with several decoders (bench protocol) and write one result file per decoder.

Every result records tokens per forward, forward passes, tokens/s (per-batch medians over repeats), the speedup
vs the job's greedy, `identical_fraction` (prompts equal to greedy's tokens) and, for a lossless decoder, whether
it emitted the tokens of greedy on its own backend (`identical_to_greedy`, `lossless_reference`: `protocol`), and
the seconds it spent compiling (`compile_s`, kept out of every time).
Optionally (the leaderboard): the modeled speedup (each decoder's forwards priced by a cost table measured on the
job's first prompt, `decoding.cost`: forwards of 1, 2, 3, 4, 8, ..., 64 rows as run, unpadded, and the output head
alone on as many rows, so that a decoder which skips layers, paper 4's, is priced by the layers it runs), and, for
prompt sets whose rows all carry a reference `answer` (the math set), task accuracy with its standard error
(`evaluate.answers`: the `synthetic_math_cot` task's extraction and exact match).
"""

from __future__ import annotations

import json
import logging
import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from ..config.settings import config_hash, model_spec
from ..decoding.cost import calibrate_on_prompt
from ..decoding.pricing import modeled_speedup
from ..evaluate.answers import is_correct
from ..io import InputError
from ..models.load import LoadedModel, load_model
from ..results.write import decode_stats, make_result, sample_record, write_result
from .protocol import BenchPrompt, encode_prompts, run_bench

log = logging.getLogger(__name__)
MODELED_ROWS = (1, 2, 3, 4, 8, 16, 32, 64)  # the cost table's chunks (wider chunks are priced as 64 rows)


def accuracy(texts: Sequence[str], rows: Sequence[dict]) -> dict[str, float] | None:
    """Mean and standard error of correctness when every row has a reference `answer` (a math prompt set); None
    otherwise (a mixed set such as Spec-Bench's would score only its math rows)."""
    if not rows or any(r.get("answer") is None for r in rows):
        return None
    hits = [float(is_correct(t, r["answer"])) for t, r in zip(texts, rows)]
    err = math.sqrt(statistics.pvariance(hits) / (len(hits) - 1)) if len(hits) > 1 else None
    return {"value": statistics.fmean(hits), "stderr": err}


def decode_prompt_set(
    loaded: LoadedModel,
    rows: Sequence[dict],
    decoders: dict[str, dict[str, Any]],
    outputs: Sequence[str],
    prompt_set: str,
    scale: str,
    config_hash: str,
    max_new_tokens: int,
    batch_size: int,
    threads: int,
    warmup: int,
    repeats: int,
    paper: str = "base",
    run: str | None = None,
    models: Mapping[str, LoadedModel] | None = None,
    papers: Mapping[str, str] | None = None,
    modeled: bool = False,
    prompts: Sequence[BenchPrompt] | None = None,
    extra_settings: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Benchmark `decoders` side by side on `rows` and write `outputs[i]` for the i-th decoder.

    `models[name]`: a decoder's own weights (trained from `loaded`); `papers[name]`: the paper a decoder's row
    belongs to (default `paper`); `modeled`: add the modeled speedup; `prompts`: token ids already made (e.g.
    random ids; `rows` then only names them: `id`, `category`); `extra_settings`: recorded in every result's
    settings. Tokens/s in each result is the bench median over repeats; acceptance statistics come from the
    generations. Returns the bench summary.
    """
    if len(outputs) != len(decoders):
        raise ValueError(f"{len(decoders)} decoders but {len(outputs)} output paths")
    prompts = list(prompts) if prompts is not None else encode_prompts(loaded, rows)
    summary, gens = run_bench(
        loaded,
        decoders,
        prompts,
        max_new_tokens,
        batch_size=batch_size,
        warmup=warmup,
        repeats=repeats,
        threads=threads,
        models=models,
    )
    cost = None
    if modeled:
        cost = calibrate_on_prompt(loaded.model, prompts[0].ids, rows=MODELED_ROWS, pad_small_chunks=False, head=True)
    settings = {
        "max_new_tokens": max_new_tokens,
        "batch_size": batch_size,
        "chat_template": loaded.chat_template,
        "threads": summary["threads"],
        "warmup": warmup,
        "repeats": repeats,
        **(extra_settings or {}),
    }
    if cost is not None:
        settings["step_cost"] = cost.as_dict()["table"]
        settings["head_cost"] = cost.as_dict()["head"]
    for (name, _), out in zip(decoders.items(), outputs):
        row = summary["decoders"][name]
        stats = decode_stats(gens[name])
        keys = (
            "tokens_per_s",
            "identical_to_greedy",
            "lossless_reference",
            "identical_fraction",
            "speedup_vs_greedy",
            "compile_s",
        )
        for key in keys:
            stats[key] = row[key]
        if cost is not None:
            stats["modeled_speedup_vs_greedy"] = modeled_speedup(gens[name], gens["greedy"], cost)
        texts = [loaded.tokenizer.decode(g.tokens, skip_special_tokens=True) for g in gens[name]]
        acc = accuracy(texts, rows)
        samples = [
            sample_record(g, id=p.id, category=p.category, text=t) for p, g, t in zip(prompts, gens[name], texts)
        ]
        result = make_result(
            kind="decode",
            paper=(papers or {}).get(name, paper),
            run=run or loaded.name,
            model=loaded.name,
            task=prompt_set,
            decoder=row["decoder"],
            n=len(prompts),
            decode_stats=stats,
            per_category=row["per_category"],
            settings=settings,
            scale=scale,
            config_hash=config_hash,
            metrics={"accuracy": acc} if acc is not None else None,
        )
        write_result(out, result, samples)
        log.info(
            "%s on %s: %.2f tok/s, %.3f tokens/forward",
            name,
            prompt_set,
            row["tokens_per_s"],
            stats["tokens_per_forward"]["pooled"],
        )
    return summary


def decode_rule_job(
    config: dict,
    model: str,
    model_dir: str | None,
    rows: Sequence[dict],
    *,
    decoders: Mapping[str, dict],
    outputs: Sequence[str],
    prompt_set: str,
    settings: Mapping[str, Any],
    bench: Mapping[str, Any],
    **extra: Any,
) -> dict[str, Any]:
    """The body of a decoding rule (`decode_prompts`, `p3_decode`): declared model `model` (from `model_dir`, its
    prepared checkpoint, when it has one) runs `decode_prompt_set` with the rule's decoders, `settings`
    ({max_new_tokens, batch_size}), `bench` ({warmup, repeats, threads}) and one output per decoder; `extra`:
    `paper`, `run`."""
    return decode_prompt_set(
        load_rule_model(config, model, model_dir),
        rows,
        decoders=dict(decoders),
        outputs=list(outputs),
        prompt_set=prompt_set,
        scale=config["scale"],
        config_hash=config_hash(config),
        threads=bench["threads"],
        warmup=bench["warmup"],
        repeats=bench["repeats"],
        **settings,
        **extra,
    )


def load_rule_model(config: dict, name: str, base_dir: str | None, checkpoint: str | None = None) -> LoadedModel:
    """Declared model `name` from its prepared directory (or a trained `checkpoint` of it), on CUDA where there
    is one."""
    import torch

    return load_model(
        model_spec(config, name),
        base_dir=base_dir,
        checkpoint=checkpoint,
        device="cuda" if torch.cuda.is_available() else "cpu",
    )


def leaderboard_rule_job(
    config: dict,
    rows: Sequence[dict],
    *,
    model: str,
    model_dir: str | None,
    job_rows: Sequence[Mapping[str, Any]],
    outputs: Sequence[str],
    prompt_set: str,
    max_new_tokens: int,
    batch_size: int,
    bench: Mapping[str, Any],
) -> dict[str, Any]:
    """The body of `leaderboard_decode`: the leaderboard model `model` (from `model_dir`) and every trained
    checkpoint a row runs on (loaded once each), all `job_rows` (`leaderboard.plan.job_rows`) side by side on the
    prompts `rows`, with the modeled speedup, one result file per row (`outputs`, in row order)."""
    loaded = load_rule_model(config, model, model_dir)
    by_checkpoint: dict[str, LoadedModel] = {}
    models: dict[str, LoadedModel] = {}
    for r in job_rows:
        if r["checkpoint"]:
            if r["checkpoint"] not in by_checkpoint:
                by_checkpoint[r["checkpoint"]] = load_rule_model(config, r["model"], None, r["checkpoint"])
            models[r["label"]] = by_checkpoint[r["checkpoint"]]
    return decode_prompt_set(
        loaded,
        rows,
        decoders={r["label"]: row_params(r) for r in job_rows},
        outputs=list(outputs),
        prompt_set=prompt_set,
        scale=config["scale"],
        config_hash=config_hash(config),
        max_new_tokens=max_new_tokens,
        batch_size=batch_size,
        threads=bench["threads"],
        warmup=bench["warmup"],
        repeats=bench["repeats"],
        paper="leaderboard",
        run=model,
        models=models,
        papers={r["label"]: r["paper"] for r in job_rows},
        modeled=True,
    )


def row_params(row: Mapping[str, Any]) -> dict[str, Any]:
    """A leaderboard row's decoder parameters: its own, then those of its `params_from` file (a JSON object with
    `params`, written by a rule of the row's paper)."""
    params = dict(row["params"])
    if row.get("params_from"):
        with open(row["params_from"], encoding="utf-8") as f:
            chosen = json.load(f)
        if not isinstance(chosen.get("params"), dict):
            raise InputError(f"{row['params_from']}: expected an object with `params` (leaderboard row {row['label']})")
        params.update(chosen["params"])
    return params

"""Decode a prompt set with several decoders (bench protocol) and write one result file per decoder."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from .bench import encode_prompts, run_bench
from .models import LoadedModel
from .results import decode_stats, make_result, sample_record, write_result

log = logging.getLogger(__name__)


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
) -> dict[str, Any]:
    """Benchmark `decoders` side by side on `rows` and write `outputs[i]` for the i-th decoder.

    Tokens/s in each result is the bench median over repeats; acceptance statistics come from the
    generations. Returns the bench summary.
    """
    if len(outputs) != len(decoders):
        raise ValueError(f"{len(decoders)} decoders but {len(outputs)} output paths")
    prompts = encode_prompts(loaded, rows)
    summary, gens = run_bench(
        loaded, decoders, prompts, max_new_tokens, batch_size=batch_size, warmup=warmup, repeats=repeats,
        threads=threads,
    )
    settings = {
        "max_new_tokens": max_new_tokens,
        "batch_size": batch_size,
        "chat_template": loaded.chat_template,
        "threads": summary["threads"],
        "warmup": warmup,
        "repeats": repeats,
    }
    for (name, _), out in zip(decoders.items(), outputs):
        row = summary["decoders"][name]
        stats = decode_stats(gens[name])
        stats["tokens_per_s"] = row["tokens_per_s"]
        stats["identical_to_greedy"] = row["identical_to_greedy"]
        stats["speedup_vs_greedy"] = row["speedup_vs_greedy"]
        samples = [
            sample_record(
                g, id=p.id, category=p.category, text=loaded.tokenizer.decode(g.tokens, skip_special_tokens=True)
            )
            for p, g in zip(prompts, gens[name])
        ]
        result = make_result(
            kind="decode",
            paper=paper,
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
        )
        write_result(out, result, samples)
        log.info("%s on %s: %.2f tok/s, %.3f tokens/forward", name, prompt_set, row["tokens_per_s"],
                 stats["tokens_per_forward"]["mean"])
    return summary

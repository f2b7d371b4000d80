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
        stats["identical_fraction"] = row["identical_fraction"]
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


def decode_rule_job(smk: Any, rows: Sequence[dict], prompt_set: str, **extra: Any) -> dict[str, Any]:
    """The body of a decoding rule (`decode_prompts`, `p3_decode`): load the rule's model (wildcard `model`,
    prepared checkpoint `input.model` when there is one) and run `decode_prompt_set` with the rule's
    `params.decoders`, `params.settings`, `params.bench` and `output.results`; `extra`: `paper`, `run`."""
    import torch

    from .config import config_hash, model_spec
    from .models import load_model

    loaded = load_model(
        model_spec(smk.config, smk.wildcards.model),
        base_dir=smk.input.get("model") or None,
        device="cuda" if torch.cuda.is_available() else "cpu",
    )
    bench = smk.params.bench
    return decode_prompt_set(
        loaded, rows, decoders=dict(smk.params.decoders), outputs=list(smk.output.results), prompt_set=prompt_set,
        scale=smk.config["scale"], config_hash=config_hash(smk.config), threads=bench["threads"],
        warmup=bench["warmup"], repeats=bench["repeats"], **smk.params.settings, **extra,
    )

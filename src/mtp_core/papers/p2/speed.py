"""Paper 2's speed experiments (§4.1 "Speedup Ratio": relative to DeepSeek MTP with K = 1; Figs 4, 5 and 8,
Table 8): the bench protocol (`bench.prompt_sets.decode_prompt_set`: same weights, prompts and threads, warm-up,
interleaved order, per-batch medians; batch 1 greedy as in App. D) over greedy and `mtp-spec` rows, each under
the experiment's decoding protocols (`P2Plan.speed_protocols`: with a KV cache, and App. D's without one, the
paper's), a protocol compared only with itself, then per row:

* `speedup_vs_baseline` (the paper's metric) beside `speedup_vs_greedy`, overall and per prompt set;
* the decoded head counters (A, C_cmp, C_step, AR, CAR, τ from the decoder's own accepted counts), to set beside
  the teacher-forced simulation's;
* a modeled speed, free of timing noise (never derived from τ), for the KV-cached rows: every forward priced
  by a cost table measured on the job's first prompt, in one-row (greedy) steps: the verification chunk
  (`cost.calibrate_on_prompt`) plus each depth's head chunk (its m + d rows and one lm_head row, `head_costs`);
  prefills excluded, as for greedy. (Uncached steps cost what the whole sequence costs: no such table prices them.)
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from transformers import DynamicCache

from ...bench.prompt_sets import decode_prompt_set
from ...decoding.cache import crop_cache
from ...decoding.cost import calibrate_on_prompt, padded_rows, timed_call
from ...decoding.pricing import CostModel
from ...io import atomic_write_json, read_jsonl
from ...models.heads import load_heads
from ...models.heads.deepseek import DeepSeekMTPHeads, chunk_mask
from ...models.load import LoadedModel
from ...results.write import samples_path
from .counters import HeadCounters, pooled
from .experiments import GREEDY_UNCACHED, REFERENCE


@torch.inference_mode()
def head_costs(
    model: torch.nn.Module, heads: DeepSeekMTPHeads, prompt: Sequence[int], max_rows: int, reps: int = 5
) -> dict[int, float]:
    """Seconds of one depth's chunk of r = 1 .. max_rows rows on a head cache holding the prompt, with the draft's
    lm_head row: the median of `reps` interleaved timings (the cache cropped after each)."""
    dev = next(model.parameters()).device
    ids = torch.tensor([list(prompt)], device=dev)
    n = ids.shape[1]
    h0 = model.model(input_ids=ids).last_hidden_state
    cache = DynamicCache()
    pos = torch.arange(n, device=dev)[None]
    heads.depth_forward(model, 1, h0[:, :-1], ids[:, 1:], pos[:, :-1], None, cache)
    times: dict[int, list[float]] = {r: [] for r in range(1, max_rows + 1)}
    for _ in range(reps):
        for r in times:
            x, tok = h0[:, -1:].expand(1, r, -1), ids[:, -1:].expand(1, r)
            p = (n - 1 + torch.arange(r, device=dev))[None]
            mask = chunk_mask(
                torch.ones(1, n - 1, dtype=torch.bool, device=dev), torch.ones(1, r, dtype=torch.bool, device=dev)
            )

            def step(x=x, tok=tok, p=p, mask=mask) -> None:
                y = heads.depth_forward(model, 1, x, tok, p, mask, cache)
                model.lm_head(y[:, -1]).argmax(-1)

            times[r].append(timed_call(step, dev))
            crop_cache(cache, r)
    return {r: statistics.median(t) for r, t in times.items()}


def modeled_steps(accepted: Sequence[int], depths: int, main: CostModel, head_s: Mapping[int, float]) -> float:
    """One generation of `mtp-spec` priced in one-row steps (module docstring): each verification after the
    prefill costs `main(D + 1 rows)`; the proposal before verification i >= 2 costs Σ_d head(m_{i-1} + d)."""
    top = max(head_s)
    verify = main(padded_rows(depths + 1, True))
    heads = sum(
        head_s[min(accepted[i - 1] + d - 1, top)] for i in range(2, len(accepted)) for d in range(1, depths + 1)
    )
    return verify * (len(accepted) - 1) + heads / main.one


def _samples(path: str) -> list[dict]:
    return list(read_jsonl(samples_path(path)))


def speed_job(
    trunks: Mapping[str, LoadedModel],
    rows: Sequence[dict],
    decoders: Mapping[str, dict[str, Any]],
    outputs: Sequence[str],
    refs: Mapping[str, Mapping[str, Any]],
    *,
    max_new_tokens: int,
    batch_size: int,
    bench: Mapping[str, int],
    modeled: bool,
    scale: str,
    config_hash: str,
) -> dict[str, Any]:
    """Bench the greedy rows (one per trunk and protocol) and the `mtp-spec` rows side by side, then add the
    paper's speedup, the decoded counters and the modeled speed to each row's result (module docstring).
    `trunks[label]`: the trunk the row decodes with; `refs[label]` (`P2Plan.speed_refs`): its greedy row (its
    trunk's, same protocol: identity and speed vs greedy), its baseline row and whether it keeps a KV cache; the
    first decoder is the first trunk's greedy row. `rows` carry their prompt set as category."""
    first = trunks[next(iter(decoders))]
    summary = decode_prompt_set(
        first,
        rows,
        decoders=dict(decoders),
        outputs=list(outputs),
        prompt_set="p2-speed",
        scale=scale,
        config_hash=config_hash,
        max_new_tokens=max_new_tokens,
        batch_size=batch_size,
        threads=bench["threads"],
        warmup=bench["warmup"],
        repeats=bench["repeats"],
        paper="p2",
        models={label: m for label, m in trunks.items() if m is not first},
    )
    speeds = {name: summary["decoders"][name] for name in decoders}
    samples = {name: _samples(path) for name, path in zip(decoders, outputs)}
    cached = {name: p for name, p in decoders.items() if refs[name]["kv_cache"]}
    priced = _priced(trunks, rows, cached, samples) if modeled and cached else {}
    for name, path in zip(decoders, outputs):
        with open(path, encoding="utf-8") as f:
            result = json.load(f)
        stats, row, ref, base = result["decode_stats"], speeds[name], refs[name]["greedy"], refs[name]["baseline"]
        same = [a["tokens"] == b["tokens"] for a, b in zip(samples[name], samples[ref])]
        stats["identical_fraction"], stats["identical_to_greedy"] = statistics.fmean(same), all(same)
        stats["speedup_vs_greedy"] = row["tokens_per_s"] / speeds[ref]["tokens_per_s"]
        stats["speedup_vs_baseline"] = row["tokens_per_s"] / speeds[base]["tokens_per_s"]
        for cat, c in result["per_category"].items():
            c["speedup_vs_baseline"] = c["tokens_per_s"] / speeds[base]["per_category"][cat]["tokens_per_s"]
        if name in priced:
            stats["modeled_speedup_vs_greedy"] = priced[name] / priced[ref]
            stats["modeled_speedup_vs_baseline"] = priced[name] / priced[base]
        if decoders[name]["decoder"] not in (REFERENCE, GREEDY_UNCACHED):
            d = int(decoders[name]["num_drafts"])
            counters = [HeadCounters.of_steps([a - 1 for a in g["accepted"][1:]], d) for g in samples[name]]
            stats["heads"] = pooled(counters).as_dict()
        result["settings"] |= {"baseline": base, "greedy": ref, "trunk": trunks[name].name}
        result["settings"]["kv_cache"] = refs[name]["kv_cache"]
        atomic_write_json(path, result)
    return summary


def _priced(
    trunks: Mapping[str, LoadedModel], rows: Sequence[dict], decoders: Mapping[str, dict], samples: Mapping[str, list]
) -> dict[str, float]:
    """Tokens per modeled one-row step of every (KV-cached) bench row, each trunk's costs measured on the first
    prompt."""
    depth_max = max([int(p.get("num_drafts") or 1) for p in decoders.values()] + [1])
    costs: dict[int, CostModel] = {}
    heads_s: dict[str, dict[int, float]] = {}
    out = {}
    for name, p in decoders.items():
        trunk = trunks[name]
        ids = trunk.encode(rows[0]["prompt"])
        if id(trunk) not in costs:
            costs[id(trunk)] = calibrate_on_prompt(trunk.model, ids, max_rows=depth_max + 1)
        gens = samples[name]
        if p["decoder"] == REFERENCE:
            steps = sum(len(g["accepted"]) - 1 for g in gens)
        else:
            if p["heads"] not in heads_s:
                heads_s[p["heads"]] = head_costs(
                    trunk.model, load_heads(p["heads"], trunk.model), ids, 2 * depth_max + 1
                )
            d = int(p["num_drafts"])
            steps = sum(modeled_steps(g["accepted"], d, costs[id(trunk)], heads_s[p["heads"]]) for g in gens)
        out[name] = sum(g["new_tokens"] for g in gens) / steps
    return out

"""Paper 2's evaluation jobs: greedy references of a main model, AR/CAR of a run's heads (teacher-forced simulation,
`acceptance`), validation metrics on held-out windows, and the main head's Top-N probability mass (App. C, Fig. 6).

* `reference_job`: greedy continuations of every prompt set from one trunk, `max_new_tokens + extra` tokens
  ignoring stops (the simulation's last step compares drafts past the budget and across an EOS); the result
  records the stop-trimmed greedy output (tokens, accuracy on prompts with answers), its samples also the full
  `continuation` and the prompt's ids. Plus the Top-N mass of the main head on the validation windows.
* `acceptance_job`: for each prompt one teacher-forced forward of the trunk and the run's heads over prompt +
  continuation (`teacher_forced_match`), then every setting D simulated (`simulate_steps`); one result per
  (prompt set, setting) with pooled counters (`decode_stats.heads`: A, C_cmp, C_step, AR, CAR, τ; also per
  category) and per-prompt steps in its samples (for paired bootstraps). Plus `val.json`: the run's loss terms
  and agreement with the main head (agree@k) on the validation windows, and KL(base ‖ main) when the trunk
  trained.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ...bench.prompt_sets import accuracy
from ...bench.protocol import encode_prompts
from ...decoding.base import GenerationResult, StopCriteria, build_decoder
from ...decoding.stopping import StopTracker
from ...io import atomic_write_json, atomic_write_text, read_jsonl
from ...models.load import LoadedModel
from ...results.write import decode_stats, make_result, sample_record, samples_path, write_result
from .acceptance import simulate_steps, teacher_forced_match
from .counters import HeadCounters, pooled
from .losses import p2_loss, scored
from .settings import P2LossConfig

log = logging.getLogger(__name__)
TOPN_GRID = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000, 200000)


def trimmed(g: GenerationResult, stop: StopCriteria, tokenizer: Any, budget: int) -> GenerationResult:
    """The output a decoder with `stop` and `budget` gives, from a continuation decoded past both."""
    tracker = StopTracker(1, stop, tokenizer, budget)
    tracker.feed(0, g.tokens)
    tokens = tracker.tokens[0]
    reason = tracker.reason[0] or "length"
    return GenerationResult(tokens, [1] * len(tokens), g.prompt_tokens, g.prefill_s, g.decode_s, reason)


def reference_job(
    loaded: LoadedModel,
    rows_by_set: Mapping[str, Sequence[dict]],
    outputs: Mapping[str, str],
    max_new_tokens: int,
    extra_tokens: int,
    batch_size: int,
    *,
    main: str,
    scale: str,
    config_hash: str,
) -> None:
    """Greedy references of every prompt set (module docstring), one result per set at `outputs[set]`."""
    greedy = build_decoder("greedy", loaded.model, loaded.tokenizer)
    stop = loaded.stop_criteria()
    for name, rows in rows_by_set.items():
        prompts = encode_prompts(loaded, rows)
        gens = greedy.generate_all([p.ids for p in prompts], max_new_tokens + extra_tokens, StopCriteria(), batch_size)
        outs = [trimmed(g, stop, loaded.tokenizer, max_new_tokens) for g in gens]
        texts = [loaded.tokenizer.decode(o.tokens, skip_special_tokens=True) for o in outs]
        acc = accuracy(texts, rows)
        samples = [
            sample_record(o, id=p.id, category=p.category, text=t, prompt_ids=p.ids, continuation=g.tokens)
            for p, o, g, t in zip(prompts, outs, gens, texts)
        ]
        result = make_result(
            kind="decode",
            paper="p2",
            run=main,
            model=loaded.name,
            task=name,
            decoder=greedy.describe(),
            n=len(prompts),
            decode_stats=decode_stats(outs),
            settings={"max_new_tokens": max_new_tokens, "extra_tokens": extra_tokens, "batch_size": batch_size},
            scale=scale,
            config_hash=config_hash,
            metrics={"accuracy": acc} if acc is not None else None,
        )
        write_result(outputs[name], result, samples)
        log.info("reference %s on %s: %d prompts, accuracy %s", main, name, len(prompts), acc)


@torch.inference_mode()
def topn_mass(trunk: torch.nn.Module, windows: np.ndarray, csv: str, summary: str, batch_size: int = 4) -> dict:
    """Mean cumulative probability of the main head's N most likely tokens, over every position of `windows`
    (App. C: 0.9952 at N = 10,000 and 0.8341 at 1,000 for the paper's 122,880-token vocabulary)."""
    dev = next(trunk.parameters()).device
    vocab = trunk.config.vocab_size
    grid = [n for n in TOPN_GRID if n < vocab] + [vocab]
    sums, sq, count = np.zeros(len(grid)), np.zeros(len(grid)), 0
    idx = torch.tensor(grid, device=dev) - 1
    for i in range(0, len(windows), batch_size):
        ids = torch.from_numpy(windows[i : i + batch_size]).to(dev)
        probs = trunk(input_ids=ids).logits.float().softmax(-1).flatten(0, 1)
        mass = probs.sort(-1, descending=True).values.cumsum(-1)[:, idx].double().cpu().numpy()
        sums, sq, count = sums + mass.sum(0), sq + (mass**2).sum(0), count + mass.shape[0]
    mean = sums / count
    stderr = np.sqrt(np.maximum(sq / count - mean**2, 0.0) / max(count - 1, 1))
    lines = ["topn,mass,stderr"] + [f"{n},{m:.6f},{e:.6f}" for n, m, e in zip(grid, mean, stderr)]
    atomic_write_text(csv, "\n".join(lines) + "\n")
    out = {"positions": count, "vocab_size": vocab, "mass": {str(n): float(m) for n, m in zip(grid, mean)}}
    atomic_write_json(summary, out)
    return out


def read_reference(path: str) -> list[dict]:
    """The samples of a reference result: id, category, prompt_ids, continuation."""
    return list(read_jsonl(samples_path(path)))


def acceptance_job(
    loaded: LoadedModel,
    heads: torch.nn.Module,
    run: str,
    depths: Sequence[int],
    references: Mapping[str, str],
    outputs: Mapping[tuple[str, int], str],
    max_new_tokens: int,
    *,
    scale: str,
    config_hash: str,
    heads_dir: str,
) -> None:
    """AR/CAR of `run`'s heads at every D of `depths` on every prompt set (module docstring)."""
    stop = loaded.stop_criteria()
    k = heads.num_heads
    for name, ref in references.items():
        samples = read_reference(ref)
        counters: dict[int, list[HeadCounters]] = defaultdict(list)
        steps_of: dict[int, list[list[int]]] = defaultdict(list)
        for s in samples:
            ids = list(s["prompt_ids"]) + list(s["continuation"])
            start = len(s["prompt_ids"]) - 1
            match = teacher_forced_match(loaded.model, heads, ids, start, max(depths))
            for d in depths:
                steps = simulate_steps(match, ids, len(s["prompt_ids"]), d, max_new_tokens, stop, loaded.tokenizer)
                steps_of[d].append(steps)
                counters[d].append(HeadCounters.of_steps(steps, d))
        for d in depths:
            by_cat: dict[str, list[HeadCounters]] = defaultdict(list)
            for s, c in zip(samples, counters[d]):
                by_cat[s["category"]].append(c)
            total = pooled(counters[d])
            stats = {
                "heads": total.as_dict(),
                "simulated": True,
                "tokens_per_forward": {"mean": total.tau, "std": None},
            }
            per_cat = {cat: {"heads": pooled(cs).as_dict()} for cat, cs in by_cat.items()}
            result = make_result(
                kind="decode",
                paper="p2",
                run=run,
                model=loaded.name,
                task=name,
                decoder={"name": "mtp-spec", "lossless": True, "params": {"heads": heads_dir, "num_drafts": d}},
                n=len(samples),
                decode_stats=stats,
                per_category=per_cat,
                settings={"max_new_tokens": max_new_tokens, "num_heads": k, "loop": d > k},
                scale=scale,
                config_hash=config_hash,
            )
            per_prompt = [
                {"id": s["id"], "category": s["category"], "steps": st, **c.as_dict()}
                for s, st, c in zip(samples, steps_of[d], counters[d])
            ]
            write_result(outputs[name, d], result, per_prompt)
            log.info("%s on %s, D=%d: AR %s CAR %s", run, name, d, np.round(total.ar, 3), np.round(total.car, 3))


@torch.inference_mode()
def validation_metrics(
    loaded: LoadedModel,
    heads: torch.nn.Module,
    windows: np.ndarray,
    loss: P2LossConfig,
    out: str,
    base: LoadedModel | None = None,
    batch_size: int = 4,
) -> dict:
    """The run's loss terms and agree@k on held-out windows, and KL(base ‖ main) per token when `base` (the
    untrained trunk) is given: means over every window (the windows have one length, so each batch's per-token
    means count by its windows; a short last batch counts less)."""
    trunk = loaded.model
    dev = next(trunk.parameters()).device
    sums: dict[str, float] = defaultdict(float)
    for i in range(0, len(windows), batch_size):
        ids = torch.from_numpy(windows[i : i + batch_size]).to(dev)
        rows = ids.shape[0]
        h0 = trunk.model(input_ids=ids).last_hidden_state
        main = trunk.lm_head(h0)
        logits = [trunk.lm_head(scored(h, k)) for k, h in enumerate(heads.forward_train(trunk, h0, ids), 1)]
        for name, v in p2_loss(main, logits, ids, loss).metrics.items():
            sums[name] += rows * float(v)
        if base is not None:
            ref = base.model(input_ids=ids).logits.float()
            kl = F.kl_div(main.float().log_softmax(-1), ref.log_softmax(-1), log_target=True, reduction="none")
            sums["kl_base_main"] += rows * float(kl.sum(-1).mean())
    metrics = {k: v / len(windows) for k, v in sums.items()}
    atomic_write_json(out, {"windows": int(len(windows)), "tokens": int(windows.size), "metrics": metrics})
    return metrics

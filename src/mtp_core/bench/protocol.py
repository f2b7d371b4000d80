"""The side-by-side benchmark protocol: same weights, prompts and threads; warm-up; interleaved order;
repeats; medians. Speed claims of every paper are measured with this, never with timed unit tests.

The warm-up decodes the first batch with every decoder, `warmup` times, up to `warmup_tokens` (16) new tokens
per turn: enough to run every code path once (prefill, the first steps, a guard's calibration, which falls into a
decoder's first `generate`) without paying a whole measured batch again. A warm-up as long as the measured
generation cost a quarter of a 4-prompt job and told nothing more. Each repeat starts the decoders afresh
(`Decoder.new_run`): a stateful decoder (the wall-clock guard's acceptance estimates) keeps nothing it learned in the
warm-up or an earlier repeat, so no repeat is timed on prompts it has learned from; what it measured of the machine
(its cost tables, calibrated in the warm-up) stays.

Prompts are batched within their category, so per-category speed is measured, not apportioned. In each
repeat every batch is decoded by every decoder, in an order rotated by batch and repeat, so slow drifts of
the machine hit all decoders alike. A decoder's time is the sum over batches of each batch's median over
repeats (`median_seconds`): a slow moment of the machine in one repeat of one batch is dropped instead of
carried into that repeat's total. Tokens/s is new tokens over that time, overall and per category. Every decoder
gets `identical_fraction`, the share of prompts whose tokens equal the reference greedy decoder's (eager, the
papers' regime; overall and per category). Lossless decoders are checked token for token (`identical_to_greedy`)
against greedy on their own backend: on the compiled backend (`decoding.static`) that is the bench's compiled
greedy where it has one (`lossless_reference` names it), since compiled kernels sum in another order than eager's
and may flip a near-tie of two logits; for compiled greedy itself `identical_fraction` is then the measured
agreement of the two backends (issue 34: lossless under `compiled` means compiled greedy's tokens).

A decoder on the compiled backend compiles in the warm-up (and on the first batch of any new shape); the seconds
it spent compiling are reported apart (`compile_s`) and taken out of every timing, the generations' own times
included. Before the warm-up every decoder reserves cache slots for the longest prompt (`Decoder.reserve`), so
that each compiles once per shape of rows, not once per cache length.

Multi-turn rows (Spec-Bench's MT-Bench part) follow Spec-Bench's protocol: each decoder answers turn 1, its own
answer joins the chat history, then it answers turn 2, and so on; a prompt's tokens, accepted lengths, forward
passes and times are those of all its turns together.
"""

from __future__ import annotations

import logging
import statistics
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..decoding.base import Decoder, GenerationResult, build_decoder
from ..models.load import LoadedModel
from ..results.write import decode_stats

log = logging.getLogger(__name__)
REFERENCE = "greedy"
WARMUP_TOKENS = 16  # new tokens per turn of a warm-up generation (module docstring)


@dataclass
class BenchPrompt:
    id: str
    category: str
    ids: list[int]  # the first turn, rendered and tokenised
    turns: tuple[str, ...] = ()  # every user turn of a multi-turn row; () for a single turn


def encode_prompts(loaded: LoadedModel, rows: Sequence[dict], chat: bool | None = None) -> list[BenchPrompt]:
    """Tokenise prompt rows (`id`, `category`, `prompt`, optional `turns`). Rows of several turns need the chat
    template: their later turns are rendered with the decoder's own answers (`generate_turns`)."""
    chat = loaded.chat_template if chat is None else chat
    out = []
    for r in rows:
        turns = tuple(r.get("turns") or ())
        if len(turns) > 1 and not chat:
            raise ValueError(f"prompt {r['id']!r} has {len(turns)} turns: multi-turn prompts need the chat template")
        out.append(
            BenchPrompt(
                str(r["id"]),
                r.get("category") or "all",
                loaded.encode(r["prompt"], chat),
                turns if len(turns) > 1 else (),
            )
        )
    return out


def median_seconds(batch_seconds: Sequence[Sequence[float]]) -> float:
    """Wall time of a run of batches from `batch_seconds[batch][repeat]`: the sum of each batch's median over
    repeats. On the 2-core sandbox one 64-token decode varies by ~5 % between back-to-back runs; the median of
    repeat totals keeps a repeat whose total carries one slow batch, the per-batch median drops it."""
    return sum(statistics.median(t) for t in batch_seconds)


def make_batches(prompts: Sequence[BenchPrompt], batch_size: int) -> list[list[int]]:
    """Indices of prompts grouped into batches that never mix categories (nor numbers of turns), in first-seen
    order."""
    groups: dict[tuple[str, int], list[int]] = defaultdict(list)
    for i, p in enumerate(prompts):
        groups[p.category, len(p.turns)].append(i)
    return [idx[j : j + batch_size] for idx in groups.values() for j in range(0, len(idx), batch_size)]


def generate_turns(
    decoder: Decoder, loaded: LoadedModel, batch: Sequence[BenchPrompt], max_new_tokens: int, stop: Any
) -> list[GenerationResult]:
    """One batch (same number of turns) through `decoder`, turn by turn as Spec-Bench does: turn t+1 is the chat
    of every earlier user turn with the decoder's own answers, up to `max_new_tokens` per turn. Per prompt, the
    turns' results are joined (tokens, accepted lengths, times; `extra["turn_new_tokens"]` per turn)."""
    results = decoder.generate([p.ids for p in batch], max_new_tokens, stop)
    if not batch[0].turns:
        return results
    per_turn = [results]
    history: list[list[dict[str, str]]] = [[{"role": "user", "content": p.turns[0]}] for p in batch]
    for t in range(1, len(batch[0].turns)):
        for h, p, g in zip(history, batch, per_turn[-1]):
            h += [
                {"role": "assistant", "content": loaded.tokenizer.decode(g.tokens, skip_special_tokens=True)},
                {"role": "user", "content": p.turns[t]},
            ]
        per_turn.append(decoder.generate([loaded.encode(h, True) for h in history], max_new_tokens, stop))
    return [
        GenerationResult(
            tokens=[x for g in turns for x in g.tokens],
            accepted=[a for g in turns for a in g.accepted],
            prompt_tokens=turns[0].prompt_tokens,
            prefill_s=sum(g.prefill_s for g in turns),
            decode_s=sum(g.decode_s for g in turns),
            stop_reason=turns[-1].stop_reason,
            extra={"turn_new_tokens": [len(g.tokens) for g in turns], "turns": [g.extra for g in turns]},
        )
        for turns in zip(*per_turn)
    ]


def drop_compile(batch: Sequence[GenerationResult], seconds: float) -> None:
    """Take `seconds` spent compiling out of a batch's generation times, which its rows share (`decode_stats` sums
    them per batch): out of the decoding time first, the rest out of the prefill's (paper 4's DMTD compiles its
    prefill's layer segments)."""
    for g in batch:
        from_decode = min(seconds, g.decode_s)
        g.decode_s -= from_decode
        g.prefill_s -= seconds - from_decode


def compiled_greedy(built: Mapping[str, Decoder], on: Mapping[str, LoadedModel], loaded: LoadedModel) -> str | None:
    """The bench's greedy on the compiled backend on `loaded` (its name), if it has one: the reference of the
    lossless check of every decoder on the compiled backend (issue 34: compiled greedy is the same algorithm on
    other kernels, whose sums may round apart from eager's and flip a near-tie)."""
    return next(
        (n for n, d in built.items() if d.name == REFERENCE and d.backend == "compiled" and on[n] is loaded), None
    )


def run_bench(
    loaded: LoadedModel,
    decoders: dict[str, dict[str, Any]],
    prompts: Sequence[BenchPrompt],
    max_new_tokens: int,
    batch_size: int = 1,
    warmup: int = 1,
    repeats: int = 3,
    threads: int | None = None,
    models: Mapping[str, LoadedModel] | None = None,
    warmup_tokens: int = WARMUP_TOKENS,
) -> tuple[dict[str, Any], dict[str, list[GenerationResult]]]:
    """Benchmark `decoders` (name -> params) side by side on `loaded`, or on `models[name]` where given (a model
    trained from `loaded`, e.g. a paper's student, with the same tokenizer): every decoder decodes the same
    prompts, compared with greedy on `loaded`.

    Returns the JSON-ready summary and each decoder's generations (of the last repeat) in prompt order.
    """
    if threads:
        torch.set_num_threads(threads)
    stop = loaded.stop_criteria()
    on = {name: (models or {}).get(name, loaded) for name in decoders}
    built: dict[str, Decoder] = {
        name: build_decoder(name, on[name].model, on[name].tokenizer, **params) for name, params in decoders.items()
    }
    batches = make_batches(prompts, batch_size)
    names = list(built)

    longest = max(len(p.ids) for p in prompts) + max_new_tokens
    for decoder in built.values():
        decoder.reserve(longest)  # one cache length for every first turn: one compile per shape of rows
    warm_batch, warm_tokens = [prompts[i] for i in batches[0]], min(max_new_tokens, warmup_tokens)
    for _ in range(warmup):
        for name in names:
            generate_turns(built[name], on[name], warm_batch, warm_tokens, stop)

    gens: dict[str, list[GenerationResult | None]] = {n: [None] * len(prompts) for n in names}
    seconds: dict[str, list[list[float]]] = {n: [[0.0] * repeats for _ in batches] for n in names}
    for r in range(repeats):
        for decoder in built.values():  # each repeat a run of its own: nothing learned from the warm-up or before
            decoder.new_run()
        for b, idx in enumerate(batches):
            shift = (b + r) % len(names)
            for name in names[shift:] + names[:shift]:
                t0, compiled = time.perf_counter(), built[name].compile_s
                out = generate_turns(built[name], on[name], [prompts[i] for i in idx], max_new_tokens, stop)
                # a batch of a shape the warm-up did not compile (fewer rows, a later turn) compiles here
                compile_s = built[name].compile_s - compiled
                seconds[name][b][r] = time.perf_counter() - t0 - compile_s
                drop_compile(out, compile_s)
                for i, g in zip(idx, out):
                    gens[name][i] = g

    reference = gens.get(REFERENCE)
    if reference is None:
        ref = build_decoder(REFERENCE, loaded.model, loaded.tokenizer)
        reference = [None] * len(prompts)
        for idx in batches:
            for i, g in zip(idx, generate_turns(ref, loaded, [prompts[i] for i in idx], max_new_tokens, stop)):
                reference[i] = g

    compiled_reference = compiled_greedy(built, on, loaded)
    summary: dict[str, Any] = {}
    for name in names:
        done: list[GenerationResult] = gens[name]  # type: ignore[assignment]
        total_new = sum(len(g.tokens) for g in done)
        stats = decode_stats(done)
        same = [g.tokens == ref_g.tokens for g, ref_g in zip(done, reference)]  # type: ignore[union-attr]
        # the lossless check: greedy on the decoder's own backend, where the bench has it (module docstring)
        own = compiled_reference if built[name].backend == "compiled" else None
        exact = [g.tokens == r.tokens for g, r in zip(done, gens[own])] if own else same  # type: ignore[union-attr]
        per_cat = {}
        for cat in dict.fromkeys(prompts[idx[0]].category for idx in batches):
            members = [g for p, g in zip(prompts, done) if p.category == cat]
            c = decode_stats(members)
            secs = [seconds[name][b] for b, idx in enumerate(batches) if prompts[idx[0]].category == cat]
            c["tokens_per_s"] = sum(len(g.tokens) for g in members) / median_seconds(secs)
            c["identical_fraction"] = statistics.fmean(s for p, s in zip(prompts, same) if p.category == cat)
            per_cat[cat] = c
        identical = all(exact) if built[name].lossless else None
        summary[name] = {
            "decoder": built[name].describe(),
            "tokens_per_s": total_new / median_seconds(seconds[name]),
            "tokens_per_s_repeats": [total_new / sum(t[r] for t in seconds[name]) for r in range(repeats)],
            "batch_seconds": seconds[name],
            "tokens_per_forward": stats["tokens_per_forward"],
            "forward_passes": stats["forward_passes"],
            "new_tokens": total_new,
            "identical_to_greedy": identical,
            "lossless_reference": own or REFERENCE,
            "identical_fraction": statistics.fmean(same) if same else None,
            "per_category": per_cat,
            "compile_s": built[name].compile_s,
        }
    for row in summary.values():
        for base in (REFERENCE, "hf-greedy"):
            row[f"speedup_vs_{base}"] = row["tokens_per_s"] / summary[base]["tokens_per_s"] if base in summary else None
    summary_all = {
        "model": loaded.name,
        "n_prompts": len(prompts),
        "max_new_tokens": max_new_tokens,
        "batch_size": batch_size,
        "warmup": warmup,
        "warmup_tokens": warm_tokens,
        "repeats": repeats,
        "threads": torch.get_num_threads(),
        "decoders": summary,
    }
    return summary_all, gens  # type: ignore[return-value]


def markdown_table(summary: dict[str, Any]) -> str:
    """The bench summary as a markdown table, one row per decoder."""

    def fmt(x: float | None, spec: str) -> str:
        return "-" if x is None else format(x, spec)

    lines = [
        "| decoder | tok/s | tokens/forward | forwards | new tokens | vs greedy | vs hf-greedy | identical |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, r in summary["decoders"].items():
        tpf = r["tokens_per_forward"]
        ident = {True: "yes", False: "NO", None: "lossy"}[r["identical_to_greedy"]]
        lines.append(
            f"| {name} | {r['tokens_per_s']:.2f} | {fmt(tpf['pooled'], '.3f')} ± {fmt(tpf['pooled_se'], '.3f')} | "
            f"{r['forward_passes']} | {r['new_tokens']} | {fmt(r['speedup_vs_greedy'], '.3f')}x | "
            f"{fmt(r['speedup_vs_hf-greedy'], '.3f')}x | {ident} |"
        )
    return "\n".join(lines)

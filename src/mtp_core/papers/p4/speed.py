"""Speed of DMTD (§3.4, Table 3, Fig. 4): random prompts, the bench protocol, and the speed-up modeled from measured
layer costs beside the measured one.

* **Prompts** (the paper's "static input length ... randomly sampled from the vocabulary"): `prompts` rows of
  `prompt_tokens` ids drawn uniformly (seeded) from the vocabulary without special ids; no stop criteria, so every
  row emits exactly `new_tokens` (speed does not depend on the weights then, only on the schedule).
* **Layer costs** (`measure_layer_costs`, on the live cache of the prompts after their prefill): `full` = one token
  through every layer and the head (a cycle start at τ = 1, a greedy step), `late` = one token through the encoding
  and decoding layers and the head (a late-only step), `start[τ]` = a cycle start with a refill of τ columns (one
  token through the encoding layers, τ through the thinking layers, one through the decoding layers, the head).
  Medians of interleaved repeats; each timed step's K/V is cropped again, so the cache stays as prefilled.
* **Modeled speed-up** of τ: τ · full / (start[τ] + (τ-1) · late), the decoder's steady state priced by those
  costs (what a perfect implementation of the schedule would gain on this machine); `1/PLT` is the paper's
  memory-bound ideal. The measured speed-up over the modeled one is the decoder's efficiency.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ...bench.protocol import BenchPrompt
from ...decoding import layers as L
from ...decoding.batch import left_pad, positions_from_mask
from ...decoding.cost import timed_call
from .cyclic import plt
from .settings import DMTDSpec
from .split import combine


def random_prompts(tokenizer: Any, vocab_size: int, n: int, tokens: int, seed: int) -> list[BenchPrompt]:
    """`n` prompts of `tokens` ids drawn uniformly from the vocabulary without special ids (seeded)."""
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    allowed = np.array([i for i in range(vocab_size) if i not in special])
    rng = np.random.default_rng(seed)
    return [BenchPrompt(f"random-{i}", "random", rng.choice(allowed, size=tokens).tolist()) for i in range(n)]


def _crop(cache: Any, layers: range, n: int) -> None:
    for i in layers:
        cache.layers[i].crop(-n)


@torch.inference_mode()
def measure_layer_costs(
    model: torch.nn.Module, spec: DMTDSpec, prompts: Sequence[Sequence[int]], taus: Sequence[int], reps: int = 7
) -> dict[str, Any]:
    """Seconds of a full step, a late-only step and a cycle start with a τ-column refill for each τ of `taus`, on
    the cache of `prompts` (one batch) after their prefill (module docstring)."""
    device = next(model.parameters()).device
    n_layers = L.num_layers(model)
    first, stop = spec.thinking(n_layers)
    ids, attention = left_pad(prompts, 0)
    ids, attention = ids.to(device), attention.to(device)
    cache = L.new_cache(model)
    pos = positions_from_mask(attention)
    h = L.embed(model, ids)
    L.run_layers(
        model,
        h,
        0,
        n_layers,
        pos=pos,
        mask=L.causal_mask(model, h, cache, pos, 0, attention),
        rope=L.rope(model, h, pos),
        cache=cache,
    )
    nxt = ids[:, -1:]
    p0 = pos[:, -1:] + 1

    def run(h: torch.Tensor, start: int, stop_: int, p: torch.Tensor) -> torch.Tensor:
        if start == stop_:
            return h
        pad = torch.cat([attention, attention.new_ones(len(ids), p.shape[1] + 8)], dim=1)
        mask = L.causal_mask(model, h, cache, p, start, pad)
        return L.run_layers(model, h, start, stop_, pos=p, mask=mask, rope=L.rope(model, h, p), cache=cache)

    def full() -> None:
        L.head(model, run(L.embed(model, nxt), 0, n_layers, p0)[:, -1])
        _crop(cache, range(n_layers), 1)

    def late() -> None:
        h = run(L.embed(model, nxt), 0, first, p0)
        L.head(model, run(h, stop, n_layers, p0)[:, -1])
        _crop(cache, [*range(first), *range(stop, n_layers)], 1)

    def start(tau: int):
        def go() -> None:
            cols = p0 + torch.arange(tau, device=device)[None]
            h = run(L.embed(model, nxt), 0, first, cols[:, -1:])
            think = run(h.expand(-1, tau, -1), first, stop, cols)  # the pending columns: τ-1 stored, 1 new
            h = combine(h, think[:, -1:], True, spec.combine)
            L.head(model, run(h, stop, n_layers, cols[:, -1:])[:, -1])
            _crop(cache, range(first), 1)
            _crop(cache, range(first, stop), tau)
            _crop(cache, range(stop, n_layers), 1)

        return go

    steps = {"full": full, "late": late, **{f"start{t}": start(int(t)) for t in taus}}
    times: dict[str, list[float]] = {k: [] for k in steps}
    for _ in range(max(1, reps)):
        for name, fn in steps.items():
            times[name].append(timed_call(fn, device))
    med = {k: statistics.median(v) for k, v in times.items()}
    return {
        "batch_size": len(prompts),
        "cache_tokens": int(ids.shape[1]),
        "reps": reps,
        "split": spec.name,
        "seconds": {"full": med["full"], "late": med["late"], "start": {int(t): med[f"start{t}"] for t in taus}},
        "modeled_speedup": {int(t): modeled_speedup(med, int(t)) for t in taus},
        "plt": {int(t): plt(n_layers, int(t), spec.decoding_layers, spec.encoding_layers) for t in taus},
    }


def modeled_speedup(seconds: dict[str, float], tau: int) -> float:
    """τ · full / (start[τ] + (τ-1) · late): tokens per second of the cycle over greedy's, priced by layer costs."""
    return tau * seconds["full"] / (seconds[f"start{tau}"] + (tau - 1) * seconds["late"])

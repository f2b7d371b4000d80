"""Decoding without a KV cache, the protocol paper 2 times (App. D: "KV cache is not used during inference"):
every forward runs the main model over the whole sequence and every head over every position, Algorithm 1 as
written. `mtp-spec` with `kv_cache: false` decodes this way (`uncached_generate`), and `greedy-uncached` is the greedy
reference under the same protocol (one forward over the whole sequence per token). Both are lossless: the main
model's argmax decides every emitted token. Rows decode one at a time (App. D: batch 1).

One step, with x_0 .. x_n verified (x_n from the last forward, not yet fed to the model) and h^0 at positions
0 .. n-1 from that forward:

1. drafts: depth k = 1 .. D runs over positions 0 .. n-1 on (h^{k-1}_i, x_{i+k}), where the tokens past x_n are the
   drafts d_1 .. d_{k-1}; d_k = argmax lm_head(h^k_{n-1});
2. verification: one forward of the main model over x_0 .. x_n, d_1 .. d_D; d_j is accepted while it equals the
   main argmax at position n + j - 1; with m accepted the step emits d_1 .. d_m and the argmax at n + m (the bonus
   token), and the forward's post-norm states at positions 0 .. n + m (causal: they saw verified tokens only) are
   the next step's h^0.

Results follow the decoders' conventions (`decoding.base`): `accepted[i]` tokens emitted by forward i (the prefill
1), `extra.drafted[i]` drafts it verified, `extra.chunk_rows[i]` rows it ran (0 for the prefill, as the tree
decoders record it); the times are the batch's (prefill: the rows' prefills together).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import torch
from transformers.masking_utils import create_causal_mask

from ...decoding.base import Decoder, GenerationResult, StopCriteria, register_decoder
from ...decoding.stopping import StopTracker
from ...models.heads.deepseek import DeepSeekMTPHeads
from .experiments import GREEDY_UNCACHED


def _main(model: torch.nn.Module, ids: list[int], last: int) -> tuple[torch.Tensor, list[int]]:
    """The main model over the whole of `ids`: its post-norm states [T, H] and its argmax at the `last` final
    positions."""
    dev = next(model.parameters()).device
    h = model.model(input_ids=torch.tensor([ids], device=dev)).last_hidden_state[0]
    return h, model.lm_head(h[len(ids) - last :]).argmax(-1).tolist()


def _drafts(model: torch.nn.Module, heads: DeepSeekMTPHeads, h0: torch.Tensor, x: list[int], depths: int) -> list[int]:
    """Step 1 of the module docstring: D drafts from every head run over positions 0 .. n-1 (n = len(x) - 1)."""
    n = len(x) - 1
    pos = torch.arange(n, device=h0.device)[None]
    h = h0[None, :n]
    mask = create_causal_mask(
        config=heads.block_config, inputs_embeds=h, attention_mask=None, cache=None, position_ids=pos
    )
    seq = list(x)
    for k in range(1, depths + 1):
        h = heads.depth_forward(model, k, h, torch.tensor([seq[k : n + k]], device=h0.device), pos, mask)
        seq.append(int(model.lm_head(h[0, -1]).argmax(-1)))
    return seq[n + 1 :]


def uncached_generate(
    model: torch.nn.Module,
    tokenizer: Any,
    heads: DeepSeekMTPHeads | None,
    depths: int,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    stop: StopCriteria,
) -> list[GenerationResult]:
    """Decode `prompts` one row at a time without any cache (module docstring); D = `depths` drafts per step from
    `heads` (D = 0: greedy, one token per forward)."""
    tracker = StopTracker(len(prompts), stop, tokenizer, max_new_tokens)
    accepted: list[list[int]] = [[] for _ in prompts]
    drafted: list[list[int]] = [[] for _ in prompts]
    chunk_rows: list[list[int]] = [[] for _ in prompts]
    t0 = time.perf_counter()
    prefill = 0.0
    with torch.inference_mode():
        for row, prompt in enumerate(prompts):
            t = time.perf_counter()
            h0, (first,) = _main(model, list(prompt), 1)
            prefill += time.perf_counter() - t
            x = [*prompt, first]
            emitted, rows, n_draft = [first], 0, 0
            while True:
                tracker.feed(row, emitted)
                accepted[row].append(len(emitted))
                drafted[row].append(n_draft)
                chunk_rows[row].append(rows)
                if tracker.done(row):
                    break
                n = len(x) - 1
                drafts = _drafts(model, heads, h0, x, depths) if depths else []
                seq = x + drafts
                h, pred = _main(model, seq, depths + 1)  # pred[j]: the main argmax at position n + j
                m = 0
                while m < depths and drafts[m] == pred[m]:
                    m += 1
                emitted, rows, n_draft = [*drafts[:m], pred[m]], len(seq), depths
                h0, x = h[: n + m + 1], x + emitted
    t2 = time.perf_counter()
    extra = {"drafted": drafted, "chunk_rows": chunk_rows}
    return tracker.results(prompts, accepted, (t0, t0 + prefill, t2), extra)


@register_decoder(GREEDY_UNCACHED)
class UncachedGreedyDecoder(Decoder):
    """Reference greedy without a KV cache (App. D's protocol): one forward over the whole sequence per token,
    rows one at a time. The baseline `greedy` row of the uncached speed protocol."""

    lossless = True

    def generate(
        self, prompts: Sequence[Sequence[int]], max_new_tokens: int, stop: StopCriteria
    ) -> list[GenerationResult]:
        return uncached_generate(self.model, self.tokenizer, None, 0, prompts, max_new_tokens, stop)

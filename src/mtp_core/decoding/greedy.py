"""Reference greedy decoding: the lossless baseline every other decoder is checked against.

KV-cached, batched with left padding; rows that stop are dropped from the batch (their cache rows are
removed), so a batch costs what its live rows cost. Produces the same tokens as
`model.generate(do_sample=False)` on the same batch.

`backend: compiled` (`decoding.static`): the same loop on a static cache with a compiled one-row step. Its shapes
stay fixed, so stopped rows are not dropped: they step on (their tokens ignored) until the whole batch stops.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch
from transformers import DynamicCache

from .base import Decoder, GenerationResult, StopCriteria, register_decoder
from .batch import prepare_batch
from .cache import select_rows
from .stopping import StopTracker


@register_decoder("greedy")
class GreedyDecoder(Decoder):
    """Argmax decoding, one token per forward. Params: `prune_finished` (default True; eager only)."""

    lossless = True
    PARAMS = ("prune_finished",)
    BACKENDS = ("eager", "compiled")

    def begin(self, device: torch.device) -> None:
        """Hook at the start of each batch (a sampling subclass seeds its generator here)."""

    def pick(self, logits: torch.Tensor) -> torch.Tensor:
        """The next token of every row from its last logits [B, V]: the argmax."""
        return logits.argmax(-1)

    @torch.inference_mode()
    def generate(
        self, prompts: Sequence[Sequence[int]], max_new_tokens: int, stop: StopCriteria
    ) -> list[GenerationResult]:
        if self.backend == "compiled":
            return self._generate_static(prompts, max_new_tokens, stop)
        prune = bool(self.params.get("prune_finished", True))
        device = next(self.model.parameters()).device
        ids, mask, pos = prepare_batch(prompts, self.tokenizer, device)
        n = len(prompts)
        tracker = StopTracker(n, stop, self.tokenizer, max_new_tokens)
        cache = DynamicCache(config=self.model.config)
        self.begin(device)

        # without padding the model takes its cheaper causal path: no mask tensor is built per step
        padded = bool((mask == 0).any())
        t0 = time.perf_counter()
        logits = self.model(
            input_ids=ids,
            attention_mask=mask if padded else None,
            position_ids=pos,
            cache=cache,
            logits_to_keep=1,
        ).logits
        nxt = self.pick(logits[:, -1])
        t1 = time.perf_counter()

        live = torch.arange(n, device=device)  # original row of each batch row
        last_pos = pos[:, -1]
        while True:
            nxt_list = nxt.tolist()
            for b, row in enumerate(live.tolist()):
                tracker.feed(row, [nxt_list[b]])
            keep = [b for b, row in enumerate(live.tolist()) if not tracker.done(row)]
            if not keep:
                break
            if prune and len(keep) < len(live):
                k = torch.tensor(keep, device=device)
                select_rows(cache, k)
                live, mask, nxt, last_pos = live[k], mask[k], nxt[k], last_pos[k]
                padded = bool((mask == 0).any())
            if padded:
                mask = torch.cat([mask, mask.new_ones(len(live), 1)], dim=1)
            last_pos = last_pos + 1
            logits = self.model(
                input_ids=nxt[:, None],
                attention_mask=mask if padded else None,
                position_ids=last_pos[:, None],
                cache=cache,
                logits_to_keep=1,
            ).logits
            nxt = self.pick(logits[:, -1])
        t2 = time.perf_counter()
        return tracker.results(prompts, [[1] * len(t) for t in tracker.tokens], (t0, t1, t2))

    def _generate_static(
        self, prompts: Sequence[Sequence[int]], max_new_tokens: int, stop: StopCriteria
    ) -> list[GenerationResult]:
        """`generate` on the static session: one eager prefill, then compiled one-row steps over the whole batch."""
        device = next(self.model.parameters()).device
        ids, mask, pos = prepare_batch(prompts, self.tokenizer, device)
        n, width = ids.shape
        tracker = StopTracker(n, stop, self.tokenizer, max_new_tokens)
        session = self.static_session(n, width + max_new_tokens)
        full_mask = session.prompt_mask(mask)
        self.begin(device)
        t0 = time.perf_counter()
        nxt = self.pick(session.prefill(ids, full_mask, pos))
        t1 = time.perf_counter()
        last_pos = pos[:, -1:]
        while True:
            for row, token in enumerate(nxt.tolist()):
                tracker.feed(row, [token])  # a stopped row's token is not kept
            if tracker.all_done:
                break
            last_pos = last_pos + 1
            nxt = self.pick(session.step(nxt[:, None], full_mask, last_pos)[:, -1])
        t2 = time.perf_counter()
        return tracker.results(prompts, [[1] * len(t) for t in tracker.tokens], (t0, t1, t2))

"""transformers' own `generate(do_sample=False)` behind the Decoder interface: the external speed anchor."""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch
from transformers import StoppingCriteria, StoppingCriteriaList

from .base import Decoder, GenerationResult, StopCriteria, register_decoder
from .batch import left_pad, pad_id_of
from .stopping import StopTracker


class _FirstCallClock(StoppingCriteria):
    """Records when generate first checks stopping, i.e. when the prefill forward has finished."""

    def __init__(self) -> None:
        self.first: float | None = None

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs) -> torch.BoolTensor:
        if self.first is None:
            self.first = time.perf_counter()
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)


@register_decoder("hf-greedy")
class HFGreedyDecoder(Decoder):
    """`model.generate(do_sample=False)` with left padding, EOS ids and stop strings."""

    lossless = True

    @torch.inference_mode()
    def generate(
        self, prompts: Sequence[Sequence[int]], max_new_tokens: int, stop: StopCriteria
    ) -> list[GenerationResult]:
        device = next(self.model.parameters()).device
        pad = pad_id_of(self.tokenizer)
        ids, mask = left_pad(prompts, pad)
        clock = _FirstCallClock()
        kwargs = {}
        if stop.stop_strings:
            kwargs.update(stop_strings=list(stop.stop_strings), tokenizer=self.tokenizer)
        t0 = time.perf_counter()
        out = self.model.generate(
            input_ids=ids.to(device),
            attention_mask=mask.to(device),
            do_sample=False,
            max_new_tokens=max_new_tokens,
            eos_token_id=list(stop.eos_ids) or None,
            pad_token_id=pad,
            stopping_criteria=StoppingCriteriaList([clock]),
            temperature=None,
            top_p=None,
            top_k=None,
            **kwargs,
        )
        t2 = time.perf_counter()
        t1 = clock.first or t2
        new = out[:, ids.shape[1] :].tolist()
        # generate pads finished rows; the tracker trims each row at its own first stop
        tracker = StopTracker(len(prompts), stop, self.tokenizer, max_new_tokens)
        for i, row in enumerate(new):
            tracker.feed(i, row)
        return tracker.results(prompts, [[1] * len(t) for t in tracker.tokens], (t0, t1, t2))

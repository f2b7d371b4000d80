"""Sampling reference decoding: the base model sampled at a temperature, one token per forward (paper 5's
"Vanilla" row: its Table 1 samples Vicuna at T 0.7 with `multinomial`, while the tree methods use typical
acceptance). The reference greedy decoder's loop (`greedy`) with its argmax replaced by a draw from
softmax(logits / temperature), from a generator seeded at every batch, so a run repeats exactly. Lossy by
definition (not greedy's tokens).
"""

from __future__ import annotations

from typing import Any

import torch

from .base import register_decoder
from .greedy import GreedyDecoder


@register_decoder("sample")
class SampleDecoder(GreedyDecoder):
    """Multinomial sampling. Params: `temperature` (default 1.0, > 0), `seed` (default 0), `prune_finished`."""

    lossless = False
    PARAMS = ("temperature", "seed")

    def __init__(self, model: torch.nn.Module, tokenizer: Any, **params: Any):
        super().__init__(model, tokenizer, **params)
        self.temperature = float(params.get("temperature", 1.0))
        if self.temperature <= 0:
            raise ValueError(
                f"sample: temperature must be > 0 (greedy is the `greedy` decoder), got {self.temperature}"
            )
        self.seed = int(params.get("seed", 0))
        self.generator: torch.Generator | None = None

    def begin(self, device: torch.device) -> None:
        self.generator = torch.Generator(device=device).manual_seed(self.seed)

    def pick(self, logits: torch.Tensor) -> torch.Tensor:
        probs = torch.softmax(logits.float() / self.temperature, dim=-1)
        return torch.multinomial(probs, 1, generator=self.generator).squeeze(-1)

"""Prompt lookup decoding (Saxena 2023, apoorvumang/prompt-lookup-decoding; transformers'
`PromptLookupCandidateGenerator`): draft by copying what followed an earlier occurrence of the last n-gram.

At each step, for n from `max_ngram` down to `min_ngram`, the last n tokens of prompt + generated text are looked
up among the earlier n-grams; the first n with a match wins. Among its matches we take the one whose
continuation is longest (capped at `num_draft`), and among those the most recent; its following tokens are the
draft, a chain verified by the tree core in one forward. No match: a plain one-token step. Lossless.

Differences from the references, none of which affects the output (always the greedy one): transformers takes
the left-most match and Spec-Bench the earliest; we prefer the most recent match that yields a full draft.
Batches are supported: every row drafts its own chain, shorter chains are padded with "no candidate". With
`adaptive=True` the shared wall-clock guard (`decoding.cost`) caps the chain length per step or takes a greedy step.
"""

from __future__ import annotations

import torch

from .base import register_decoder
from .ngram import PathDraftDecoder
from .tree import TreeState


def prompt_lookup_draft(seq: torch.Tensor, max_ngram: int = 3, min_ngram: int = 1, num_draft: int = 3) -> torch.Tensor:
    """Draft tokens (possibly none) continuing `seq` [L], by n-gram lookup in `seq` itself (vectorised per n)."""
    length = int(seq.numel())
    if num_draft <= 0 or length < 2:
        return seq.new_empty(0)
    for n in range(min(max_ngram, length - 1), min_ngram - 1, -1):
        # windows starting at j = 0 .. L-1-n end before the last token, so each has a non-empty continuation
        windows = seq[: length - 1].unfold(0, n, 1)
        hits = torch.nonzero((windows == seq[length - n :]).all(1)).flatten()
        if hits.numel():
            avail = (length - (hits + n)).clamp(max=num_draft)
            start = int(hits[avail == avail.max()].max()) + n
            return seq[start : start + num_draft]
    return seq.new_empty(0)


@register_decoder("prompt-lookup")
class PromptLookupDecoder(PathDraftDecoder):
    """Params: `max_ngram` (3), `min_ngram` (1), `num_draft` (chain length, 3), the wall-clock guard's
    (`decoding.cost`: `adaptive`, ...; option = chain length), plus TreeDecoder's."""

    lossless = True
    chain_drafts = True
    PARAMS = ("num_draft", "max_ngram", "min_ngram")

    def __init__(self, model, tokenizer, **params):
        num_draft = int(params.get("num_draft", 3))
        super().__init__(model, tokenizer, draft_depth=num_draft, max_rows=num_draft + 1, **params)
        self.max_ngram = int(params.get("max_ngram", 3))
        self.min_ngram = int(params.get("min_ngram", 1))
        self.num_draft = num_draft
        if not 1 <= self.min_ngram <= self.max_ngram:
            raise ValueError(f"prompt-lookup: need 1 <= min_ngram <= max_ngram, got {self.min_ngram}, {self.max_ngram}")
        if self.num_draft < 0:
            raise ValueError(f"prompt-lookup: num_draft must be >= 0, got {self.num_draft}")

    def draft_paths(self, state: TreeState) -> list[list[tuple[int, ...]]]:
        drafts = [
            prompt_lookup_draft(torch.tensor(h), self.max_ngram, self.min_ngram, self.num_draft).tolist()
            for h in state.history
        ]
        return [[tuple(d)] if d else [] for d in drafts]

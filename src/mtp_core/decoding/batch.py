"""Batch assembly for decoders: left padding and the position ids that go with it."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def left_pad(prompts: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad token lists into `input_ids` and a 0/1 `attention_mask` of shape [batch, max_len]."""
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token")
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = torch.as_tensor(list(p), dtype=torch.long)
        mask[i, width - len(p) :] = 1
    return ids, mask


def positions_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids counting only real tokens (pads get 1, as transformers' generate does)."""
    pos = attention_mask.long().cumsum(-1) - 1
    return pos.masked_fill(attention_mask == 0, 1)

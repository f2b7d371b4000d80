"""Batch assembly for decoders: left padding and the position ids that go with it."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def pad_id_of(tokenizer) -> int:
    """The id used for left padding: the tokenizer's pad id, else its EOS id, else 0."""
    pad = tokenizer.pad_token_id
    if pad is None:
        pad = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else 0
    return int(pad)


def prepare_batch(
    prompts: Sequence[Sequence[int]], tokenizer, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Left-padded `input_ids`, `attention_mask` and position ids of a batch of prompts, on `device`."""
    ids, mask = left_pad(prompts, pad_id_of(tokenizer))
    ids, mask = ids.to(device), mask.to(device)
    return ids, mask, positions_from_mask(mask)


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

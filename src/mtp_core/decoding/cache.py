"""KV-cache helpers: the one place that knows how this transformers version crops and selects caches."""

from __future__ import annotations

import torch
from transformers import DynamicCache


def crop_cache(cache: DynamicCache, n_drop: int) -> None:
    """Drop the last `n_drop` positions of every layer (transformers 5 takes a negative count)."""
    if n_drop > 0:
        cache.crop(-n_drop)


def select_rows(cache: DynamicCache, rows: torch.Tensor) -> None:
    """Keep only the batch rows `rows` (a 1-D index tensor) of every layer, in place."""
    cache.batch_select_indices(rows)

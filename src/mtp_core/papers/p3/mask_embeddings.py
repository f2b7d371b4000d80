"""Paper 3, Section 3.1: the embeddings of the mask tokens probed into the frozen model. Strategies (`settings.STRATEGIES`):
the mean of the prompt's token embeddings updated with each generated token (`prompt_mean`, the paper's: an
exponential moving average, `ema_update`; the published text gives no formula for Eq. 4 nor a value of its alpha), the last
token(s) (`last_n`), a Gaussian draw from the vocabulary's embedding statistics (`gaussian`), and the vocabulary
mean (`vocab_mean`, not in the paper). Pure tensor functions; the decoder (`probing`) applies them."""

from __future__ import annotations

from typing import Any

import torch


def vocab_rows(model: torch.nn.Module, tokenizer: Any) -> int:
    """Rows of the input-embedding matrix that belong to the tokenizer's vocabulary (padding rows excluded)."""
    n = int(model.get_input_embeddings().weight.shape[0])
    try:
        return min(n, len(tokenizer)) if tokenizer is not None else n
    except TypeError:
        return n


def vocab_mean_embedding(weight: torch.Tensor, n_rows: int | None = None) -> torch.Tensor:
    """[H] mean of the first `n_rows` embedding rows (all rows when None), in float32."""
    return weight[: n_rows or weight.shape[0]].float().mean(0)


def vocab_gaussian_embedding(weight: torch.Tensor, n_rows: int | None = None, seed: int = 0) -> torch.Tensor:
    """[H] one draw from N(mu, sigma^2) per dimension, mu / sigma over the first `n_rows` embedding rows."""
    w = weight[: n_rows or weight.shape[0]].float()
    gen = torch.Generator().manual_seed(int(seed))
    z = torch.randn(w.shape[1], generator=gen)
    return w.mean(0) + w.std(0) * z.to(w.device)


def masked_mean(emb: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[B, H] mean of `emb` [B, L, H] over the positions where `mask` [B, L] is nonzero."""
    w = mask.to(emb.dtype)[..., None]
    return (emb * w).sum(1) / w.sum(1).clamp(min=1)


def last_n_mask(mask: torch.Tensor, n: int) -> torch.Tensor:
    """[B, L] 0/1: the last `n` real (mask 1) positions of each row (all of them in shorter rows)."""
    real = mask.long()
    from_end = real.flip(1).cumsum(1).flip(1)  # real tokens at or after each position
    return (real.bool() & (from_end <= n)).long()


def ema_update(e: torch.Tensor, new: torch.Tensor, count: torch.Tensor, alpha: float) -> torch.Tensor:
    """Fold `count[b]` new token embeddings `new` [B, T, H] (padding after them) into `e` [B, H], one by one:
    e <- (1 - alpha) e + alpha * x. Closed form: (1-a)^n e + sum_j a (1-a)^(n-1-j) x_j."""
    t = new.shape[1]
    j = torch.arange(t, device=new.device)[None]
    n = count.to(new.device)[:, None]
    w = torch.where(j < n, alpha * (1 - alpha) ** (n - 1 - j).clamp(min=0).to(new.dtype), 0.0)
    keep = (1 - alpha) ** count.to(e.device, e.dtype)
    return e * keep[:, None] + (w[..., None] * new).sum(1).to(e.dtype)

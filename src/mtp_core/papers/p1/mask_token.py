"""The P1 `<MTP>` mask token: registration and Gaussian initialisation of its embedding rows (paper 1, §4.1).

§4.1: "We randomly initialize a special <MTP> token in the embedding and un-embedding matrices of the MTP LM
according to the mean and variance of the existing pretrained embeddings." We draw the new row from
N(mean, covariance) of the real-token rows (the rows `0..len(tokenizer)-1` before the token is added; spare
padding rows of the matrix are not statistics of the vocabulary), with a seeded generator, for the input
embedding and, when untied, for the output embedding too. One id serves every mask slot (the paper and the
README; the official training code adds the within-span slot number).

Differences from the official `add_mtp_tokens.py`: it adds 32 tokens, and it initialises rows
(via HF `mean_resizing`, whose draw uses 1e-9 times the covariance, i.e. essentially the mean) only when the
matrix is resized; with spare rows (Qwen3) the token gets an untrained padding row. We initialise in
both cases. `cov_scale` scales the covariance (1e-9 gives HF's near-mean init).

Singular covariance (fewer real rows than the hidden size, or collinear rows): a Cholesky factor is tried first;
if it fails, the symmetric eigendecomposition with round-off eigenvalues set to 0 gives an exact square root, so the
draw is from the (degenerate) Gaussian with exactly that covariance, without a jitter bias.
"""

from __future__ import annotations

from typing import Any

import torch

MTP_TOKEN = "<MTP>"


def mask_token_id(tokenizer: Any, token: str = MTP_TOKEN) -> int | None:
    """The id of `token` if the tokenizer has it as a whole token, else None."""
    vocab = tokenizer.get_vocab()
    return int(vocab[token]) if token in vocab else None


def _cov_factor(cov: torch.Tensor) -> torch.Tensor:
    """A matrix A with A @ A.T == cov (float64): Cholesky, or a clamped eigendecomposition if cov is singular."""
    chol, info = torch.linalg.cholesky_ex(cov)
    if int(info) == 0 and torch.isfinite(chol).all():
        return chol
    evals, evecs = torch.linalg.eigh(cov)
    # eigenvalues at round-off level are zeros of the true covariance (numpy's matrix_rank tolerance)
    tol = evals.abs().max() * cov.shape[0] * torch.finfo(cov.dtype).eps
    evals = torch.where(evals > tol, evals, torch.zeros_like(evals))
    return evecs * evals.sqrt()[None, :]


def gaussian_like(
    rows: torch.Tensor, n: int, *, generator: torch.Generator | None = None, cov_scale: float = 1.0
) -> torch.Tensor:
    """`n` draws from N(mean(rows), cov_scale * cov(rows)), in `rows`' dtype and device.

    Statistics and the draw are in float64; the standard-normal noise comes from `generator` (CPU).
    """
    if rows.dim() != 2 or rows.shape[0] < 2:
        raise ValueError(f"need a [n >= 2, hidden] matrix of rows, got shape {tuple(rows.shape)}")
    x = rows.detach().to(torch.float64)
    mean = x.mean(0)
    xc = x - mean
    cov = (xc.T @ xc) / (x.shape[0] - 1) * cov_scale
    factor = _cov_factor(cov)
    eps = torch.randn(n, x.shape[1], generator=generator, dtype=torch.float64).to(x.device)
    return (mean + eps @ factor.T).to(rows.dtype)


def _tied(model: Any) -> bool:
    out = model.get_output_embeddings()
    if out is None:
        return True
    return out.weight is model.get_input_embeddings().weight or (
        out.weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    )


def _register(tokenizer: Any, token: str) -> None:
    from tokenizers import AddedToken

    added = AddedToken(token, special=True, normalized=False, single_word=False, lstrip=False, rstrip=False)
    try:  # transformers 5: listed in extra_special_tokens, saved in tokenizer_config.json
        tokenizer.add_special_tokens({"extra_special_tokens": [added]}, replace_extra_special_tokens=False)
    except (TypeError, ValueError, KeyError):
        tokenizer.add_tokens([added], special_tokens=True)


def add_mask_token(
    model: Any,
    tokenizer: Any,
    token: str = MTP_TOKEN,
    seed: int = 0,
    *,
    cov_scale: float = 1.0,
    pad_to_multiple_of: int | None = None,
) -> int:
    """Register `token` as a special token and initialise its embedding row(s) (§4.1); return its id.

    Embeddings are resized only when the new id does not fit the matrix (with `pad_to_multiple_of` if given);
    otherwise the first spare row is used. The input row (and the output row when untied; an output bias gets
    the mean real-token bias) is a draw from `gaussian_like` of the real-token rows with a generator seeded by
    `seed`. Idempotent: if the tokenizer already has the token, its id is returned and nothing is touched.
    Also sets `model.config.mtp_mask_token_id`, so a saved student records its mask id.
    """
    emb = model.get_input_embeddings()
    existing = mask_token_id(tokenizer, token)
    if existing is not None:
        if existing >= emb.weight.shape[0]:
            raise ValueError(
                f"tokenizer has {token!r} as id {existing} but the model's embedding matrix has only "
                f"{emb.weight.shape[0]} rows (model and tokenizer do not belong together)"
            )
        model.config.mtp_mask_token_id = existing
        return existing
    n_real = min(len(tokenizer), emb.weight.shape[0])
    _register(tokenizer, token)
    new_id = mask_token_id(tokenizer, token)
    if new_id is None:
        raise RuntimeError(f"could not add {token!r} to the tokenizer")
    if new_id >= emb.weight.shape[0]:
        model.resize_token_embeddings(len(tokenizer), pad_to_multiple_of=pad_to_multiple_of, mean_resizing=False)
        emb = model.get_input_embeddings()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        emb.weight[new_id] = gaussian_like(emb.weight[:n_real], 1, generator=gen, cov_scale=cov_scale)[0]
        if not _tied(model):
            out = model.get_output_embeddings()
            out.weight[new_id] = gaussian_like(out.weight[:n_real], 1, generator=gen, cov_scale=cov_scale)[0]
            if getattr(out, "bias", None) is not None:
                out.bias[new_id] = out.bias[:n_real].mean()
    rows = model.get_input_embeddings().weight.shape[0]
    text_cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    if getattr(text_cfg, "vocab_size", rows) != rows:
        text_cfg.vocab_size = rows
    model.config.mtp_mask_token_id = new_id
    return new_id

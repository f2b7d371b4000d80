"""The P1 `<MTP>` token (paper 1 §4.1): registration, Gaussian init of its rows, idempotence, save/load."""

from __future__ import annotations

import pytest
import torch

from mtp_core.models.load import load_model, tiny_model, tiny_tokenizer
from mtp_core.papers.p1.mask_token import MTP_TOKEN, add_mask_token, gaussian_like, mask_token_id
from tests.conftest import tiny_spec

N_REAL = 259  # ids of the tiny byte-level tokenizer; the tiny models have 320 rows


def _fresh(arch: str, **overrides):
    return tiny_model(tiny_spec(arch, **overrides)), tiny_tokenizer()


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_tied_spare_row_is_used_and_initialised(arch):
    model, tok = _fresh(arch)
    before = model.get_input_embeddings().weight.detach().clone()
    mid = add_mask_token(model, tok, seed=3)
    w = model.get_input_embeddings().weight
    assert mid == N_REAL == mask_token_id(tok) and len(tok) == N_REAL + 1
    assert w.shape[0] == 320 == model.config.vocab_size  # no resize: the matrix had spare rows
    assert model.config.mtp_mask_token_id == mid
    others = torch.ones(320, dtype=torch.bool)
    others[mid] = False
    assert torch.equal(w[others], before[others]) and not torch.equal(w[mid], before[mid])
    assert model.get_output_embeddings().weight.data_ptr() == w.data_ptr()  # still tied
    # exactly the seeded Gaussian draw from the real-token rows (not the spare rows)
    expected = gaussian_like(before[:N_REAL], 1, generator=torch.Generator().manual_seed(3))[0]
    torch.testing.assert_close(w[mid], expected)
    # a single special token: one id, dropped when decoding with skip_special_tokens
    ids = tok("ab" + MTP_TOKEN + "c").input_ids
    assert ids.count(mid) == 1 and tok.decode(ids, skip_special_tokens=True) == "abc"
    assert MTP_TOKEN in tok.all_special_tokens


def test_idempotent_and_seeded():
    model, tok = _fresh("llama")
    mid = add_mask_token(model, tok, seed=0)
    row = model.get_input_embeddings().weight[mid].detach().clone()
    assert add_mask_token(model, tok, seed=99) == mid and len(tok) == N_REAL + 1
    assert torch.equal(model.get_input_embeddings().weight[mid], row)  # not re-initialised
    m2, t2 = _fresh("llama")
    assert add_mask_token(m2, t2, seed=0) == mid and torch.equal(m2.get_input_embeddings().weight[mid], row)
    m3, t3 = _fresh("llama")
    add_mask_token(m3, t3, seed=1)
    assert not torch.equal(m3.get_input_embeddings().weight[mid], row)


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_untied_initialises_both_rows_from_their_own_matrix(arch):
    model, tok = _fresh(arch, tie_word_embeddings=False)
    emb0 = model.get_input_embeddings().weight.detach().clone()
    out0 = model.get_output_embeddings().weight.detach().clone()
    assert not torch.equal(emb0, out0)
    mid = add_mask_token(model, tok, seed=5)
    gen = torch.Generator().manual_seed(5)
    e = gaussian_like(emb0[:N_REAL], 1, generator=gen)[0]
    o = gaussian_like(out0[:N_REAL], 1, generator=gen)[0]
    torch.testing.assert_close(model.get_input_embeddings().weight[mid], e)
    torch.testing.assert_close(model.get_output_embeddings().weight[mid], o)
    assert torch.equal(model.get_output_embeddings().weight[:mid], out0[:mid])


@pytest.mark.parametrize("multiple, rows", [(None, N_REAL + 1), (64, 320)])
def test_resizes_when_the_id_does_not_fit(multiple, rows):
    model, tok = _fresh("qwen3", tie_word_embeddings=False)
    model.resize_token_embeddings(N_REAL, mean_resizing=False)  # no spare rows, like Llama-3's 128256
    emb0 = model.get_input_embeddings().weight.detach().clone()
    mid = add_mask_token(model, tok, seed=0, pad_to_multiple_of=multiple)
    assert mid == N_REAL
    assert model.get_input_embeddings().weight.shape[0] == rows == model.config.vocab_size
    assert model.get_output_embeddings().weight.shape[0] == rows
    assert torch.equal(model.get_input_embeddings().weight[:N_REAL], emb0)
    expected = gaussian_like(emb0, 1, generator=torch.Generator().manual_seed(0))[0]
    torch.testing.assert_close(model.get_input_embeddings().weight[mid], expected)
    logits = model(torch.tensor([[5, mid, mid]])).logits
    assert logits.shape == (1, 3, rows) and torch.isfinite(logits).all()


def test_gaussian_draws_match_mean_and_covariance():
    rows = tiny_model(tiny_spec("llama")).get_input_embeddings().weight.detach()[:N_REAL]
    n = 20000
    draws = gaussian_like(rows, n, generator=torch.Generator().manual_seed(0)).double()
    x = rows.double()
    mean, cov = x.mean(0), torch.cov(x.T)
    se = (cov.diagonal() / n).sqrt()
    assert ((draws.mean(0) - mean).abs() < 5 * se).all()
    assert torch.linalg.norm(torch.cov(draws.T) - cov) / torch.linalg.norm(cov) < 0.05
    assert gaussian_like(rows, 2).dtype == rows.dtype


def test_singular_covariance_falls_back_to_an_exact_square_root():
    g = torch.Generator().manual_seed(0)
    # 10 rows in 64 dims: a rank-9 covariance, on which Cholesky fails
    rows = torch.randn(10, 64, generator=g, dtype=torch.float64)
    draws = gaussian_like(rows, 5000, generator=torch.Generator().manual_seed(1))
    assert draws.dtype == torch.float64 and torch.isfinite(draws).all()
    x = rows.double()
    cov = torch.cov(x.T)
    assert torch.linalg.norm(torch.cov(draws.T) - cov) / torch.linalg.norm(cov) < 0.08
    # the draws stay in the affine span of the rows (no jitter pushes them out of it)
    basis = torch.linalg.svd(x - x.mean(0), full_matrices=False).Vh[:9]
    centred = draws - x.mean(0)
    resid = centred - centred @ basis.T @ basis
    assert resid.abs().max() < 1e-8


def test_save_and_load_round_trip(tmp_path):
    model, tok = _fresh("llama")
    mid = add_mask_token(model, tok, seed=2)
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    loaded = load_model(tiny_spec("llama"), checkpoint=tmp_path / "m")
    assert mask_token_id(loaded.tokenizer) == mid and len(loaded.tokenizer) == N_REAL + 1
    assert loaded.tokenizer(MTP_TOKEN).input_ids == [mid]
    assert loaded.model.config.mtp_mask_token_id == mid
    assert loaded.model.config.vocab_size == loaded.model.get_input_embeddings().weight.shape[0] > mid
    torch.testing.assert_close(
        loaded.model.get_input_embeddings().weight[mid], model.get_input_embeddings().weight[mid]
    )
    row = loaded.model.get_input_embeddings().weight[mid].detach().clone()
    assert add_mask_token(loaded.model, loaded.tokenizer, seed=7) == mid
    assert torch.equal(loaded.model.get_input_embeddings().weight[mid], row)

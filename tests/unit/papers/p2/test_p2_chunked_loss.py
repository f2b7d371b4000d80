"""Paper 2's loss in chunks of target positions (`chunked.p2_loss_hidden`) against the loss of whole logits
(`p2_loss`, itself tested by hand in test_p2_losses.py): the same loss, metrics and gradients (w.r.t. the main and
head states and the output head's weight) for every loss setting and chunk size, including chunks where the deeper
heads have no target yet and a last chunk shorter than the others; one chunk is the whole-logits computation, bit
for bit; and nothing of vocabulary size is kept for the backward outside the chunks' recomputation."""

from __future__ import annotations

import pytest
import torch

from mtp_core.papers.p2.chunked import chunk_positions, p2_loss_hidden
from mtp_core.papers.p2.losses import p2_loss, scored
from mtp_core.papers.p2.settings import P2LossConfig

B, S, D, V, K = 2, 11, 8, 37, 3  # 10 targets per window

SETTINGS = {
    "forward": {},
    "reverse": {"direction": "reverse"},
    "hybrid": {"direction": "hybrid", "hybrid_weight": 0.3},
    "union": {"index": "union"},
    "norm_full": {"norm": "full"},
    "union_full_reverse": {"index": "union", "norm": "full", "direction": "reverse"},
    "no_detach": {"detach": False},
    "no_detach_hybrid_union": {"detach": False, "direction": "hybrid", "index": "union"},
    "ensemble_mean": {"teacher": "ensemble_mean", "beta": 0.5},
    "ensemble_mean_no_detach": {"teacher": "ensemble_mean", "detach": False},
    "ensemble_split": {"teacher": "ensemble_split", "beta": 0.5},
    "ensemble_split_no_detach_reverse": {"teacher": "ensemble_split", "detach": False, "direction": "reverse"},
    "topn_v": {"topn": 1000},
    "topn_1": {"topn": 1},
    "mtp_beta0": {"beta": 0.0},
    "step_weights": {"weight_schedule": {"until_step": 4, "alpha": [0.7, 0.3], "beta": [0.1, 0.5]}},
    "by_heads_main_weight": {"normalize_by_heads": True, "main_weight": 0.5},
}


def _case(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, V, (B, S), generator=g)
    h0 = torch.randn(B, S, D, generator=g)
    hs = [torch.randn(B, S, D, generator=g) for _ in range(K)]
    weight = torch.randn(V, D, generator=g)
    return ids, h0, hs, weight


def _run(cfg: P2LossConfig, chunked: bool, first_depth: int = 1, step: int = 3, seed: int = 0):
    """The loss, metrics and gradients (h^0, each h^k, lm_head weight) of whole logits or of chunks."""
    ids, h0, hs, weight = _case(seed)
    h0.requires_grad_()
    hs = [h.requires_grad_() for h in hs][first_depth - 1 :]
    lm_head = torch.nn.Linear(D, V, bias=False)
    with torch.no_grad():
        lm_head.weight.copy_(weight)
    if chunked:
        out = p2_loss_hidden(lm_head, h0, hs, ids, cfg, step, first_depth)
    else:
        heads = [lm_head(scored(h, k)) for k, h in enumerate(hs, first_depth)]
        out = p2_loss(lm_head(h0), heads, ids, cfg, step, first_depth)
    out.loss.backward()
    return out, [h0.grad, *[h.grad for h in hs], lm_head.weight.grad]


def _assert_same(a, b, exact: bool = False):
    (out_a, grads_a), (out_b, grads_b) = a, b
    check = (lambda x, y: torch.equal(x, y)) if exact else (lambda x, y: torch.allclose(x.double(), y.double(), rtol=1e-5, atol=1e-6))  # fmt: skip
    assert check(out_a.loss, out_b.loss), (float(out_a.loss), float(out_b.loss))
    assert list(out_a.metrics) == list(out_b.metrics)
    for name in out_a.metrics:
        assert check(torch.as_tensor(out_a.metrics[name]), torch.as_tensor(out_b.metrics[name]).to(torch.as_tensor(out_a.metrics[name]).dtype)), name  # fmt: skip
    for i, (x, y) in enumerate(zip(grads_a, grads_b)):
        assert (x is None) == (y is None), i
        if x is not None:
            assert check(x, y), (i, float((x - y).abs().max()))


@pytest.mark.parametrize("rows", [1, 3, 6, 14])
@pytest.mark.parametrize("setting", list(SETTINGS))
def test_chunks_give_the_loss_metrics_and_gradients_of_whole_logits(setting, rows):
    """chunk_rows 1, 3, 6, 14 with 2 windows: chunks of 1, 1, 3 and 7 targets (10 per window: the last chunk is
    shorter; the first chunks hold no target of the deeper heads)."""
    cfg = {"topn": 6, **SETTINGS[setting]}
    whole = _run(P2LossConfig(**cfg, chunk_rows=None), chunked=False)
    chunks = _run(P2LossConfig(**cfg, chunk_rows=rows), chunked=True)
    _assert_same(whole, chunks)


@pytest.mark.parametrize("setting", ["forward", "no_detach", "union"])
def test_chunks_of_a_looped_extension(setting):
    """Depths 2 and 3 trained on frozen depth 1 (first_depth 2): only they are scored, in chunks as whole."""
    cfg = {"topn": 6, **SETTINGS[setting]}
    whole = _run(P2LossConfig(**cfg, chunk_rows=None), chunked=False, first_depth=2)
    chunks = _run(P2LossConfig(**cfg, chunk_rows=5), chunked=True, first_depth=2)
    _assert_same(whole, chunks)
    assert "ce@1" not in chunks[0].metrics and "ce@3" in chunks[0].metrics


def test_one_chunk_is_the_whole_logits_computation():
    """A batch that fits in one chunk (the embedded and tiny scales at the default 1024 rows) takes exactly the
    whole-logits path: loss, metrics and gradients equal bit for bit."""
    for setting in ("forward", "ensemble_split", "no_detach_hybrid_union"):
        cfg = {"topn": 6, **SETTINGS[setting]}
        whole = _run(P2LossConfig(**cfg, chunk_rows=None), chunked=False)
        _assert_same(whole, _run(P2LossConfig(**cfg), chunked=True), exact=True)  # default 1024 >= 2 x 10
        _assert_same(whole, _run(P2LossConfig(**cfg, chunk_rows=B * (S - 1)), chunked=True), exact=True)
    assert chunk_positions(1024, 8, 127) == 127 and chunk_positions(1024, 2, 4095) == 512
    assert chunk_positions(1, 2, 10) == 1 and chunk_positions(None, 2, 10) == 10


def test_an_ensemble_needs_every_earlier_depth():
    ids, h0, hs, weight = _case()
    lm_head = torch.nn.Linear(D, V, bias=False)
    with pytest.raises(ValueError, match="depths 1..1"):
        p2_loss_hidden(lm_head, h0, hs[1:], ids, P2LossConfig(topn=6, teacher="ensemble_mean", chunk_rows=4), 0, 2)


def _saved_vocab_elements(cfg: P2LossConfig) -> int:
    """Elements of the tensors with a vocabulary-sized last dimension that autograd keeps for the backward,
    outside checkpointed regions (which keep nothing: their backward recomputes them)."""
    ids, h0, hs, weight = _case()
    h0.requires_grad_()
    hs = [h.requires_grad_() for h in hs]
    lm_head = torch.nn.Linear(D, V, bias=False)
    kept = []

    def pack(t):
        if t.dim() >= 2 and t.shape[-1] == V and t.shape[0] != V:
            kept.append(t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        p2_loss_hidden(lm_head, h0, hs, ids, cfg).loss.backward()
    return sum(kept)


def test_chunks_keep_no_vocabulary_tensor_for_the_backward():
    assert _saved_vocab_elements(P2LossConfig(topn=6, chunk_rows=None)) >= (K + 1) * B * (S - 1 - K) * V
    assert _saved_vocab_elements(P2LossConfig(topn=6, chunk_rows=4)) == 0
    assert _saved_vocab_elements(P2LossConfig(topn=6, chunk_rows=4, index="union", norm="full", detach=False)) == 0


def test_chunk_rows_is_checked():
    with pytest.raises(ValueError, match="chunk_rows"):
        P2LossConfig(chunk_rows=0)

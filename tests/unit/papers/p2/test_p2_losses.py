"""Paper 2's loss against hand computation: Top-N KL (forward, reverse, hybrid, renormalised or full, union), the
identities N = 1 -> 0 and N = V -> `F.kl_div`, the teacher's alignment on the same target, ensemble teachers, step
weights, and the stop-gradient (no gradient reaches the main head through the KL when detached)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from mtp_core.papers.p2.losses import aligned, p2_loss, scored, teachers, topn_kl
from mtp_core.papers.p2.settings import P2LossConfig

T = torch.tensor([2.0, 1.0, 0.5, -1.0, 0.0, -2.0])  # teacher logits, V = 6: Top-3 = {0, 1, 2}
S = torch.tensor([0.0, 1.5, 0.2, 3.0, -0.5, 0.1])  # student logits: its own Top-3 = {3, 1, 2}


def _softmax(xs):
    z = sum(math.exp(x) for x in xs)
    return [math.exp(x) / z for x in xs]


def _kl(p, q):
    return sum(a * (math.log(a) - math.log(b)) for a, b in zip(p, q))


def test_topn_kl_by_hand():
    q = _softmax([2.0, 1.0, 0.5])  # renormalised within I = TopK(teacher, 3)
    p = _softmax([0.0, 1.5, 0.2])
    fwd, rev = _kl(q, p), _kl(p, q)
    assert float(topn_kl(S, T, 3)) == pytest.approx(fwd, rel=1e-6)
    assert float(topn_kl(S, T, 3, direction="reverse")) == pytest.approx(rev, rel=1e-6)
    assert float(topn_kl(S, T, 3, direction="hybrid")) == pytest.approx(0.5 * fwd + 0.5 * rev, rel=1e-6)
    assert float(topn_kl(S, T, 3, direction="hybrid", hybrid_weight=0.8)) == pytest.approx(
        0.8 * fwd + 0.2 * rev, rel=1e-6
    )
    # norm full: the full-vocabulary softmax, then the Top-3 entries
    qf, pf = _softmax(T.tolist()), _softmax(S.tolist())
    full = sum(qf[i] * (math.log(qf[i]) - math.log(pf[i])) for i in (0, 1, 2))
    assert float(topn_kl(S, T, 3, norm="full")) == pytest.approx(full, rel=1e-6)
    # union ("N x 2"): I = {0, 1, 2} U {3, 1, 2} = {0, 1, 2, 3}, renormalised over it
    qu, pu = _softmax([2.0, 1.0, 0.5, -1.0]), _softmax([0.0, 1.5, 0.2, 3.0])
    assert float(topn_kl(S, T, 3, index="union")) == pytest.approx(_kl(qu, pu), rel=1e-6)


def test_topn_identities():
    torch.manual_seed(0)
    s, t = torch.randn(3, 5, 40), torch.randn(3, 5, 40)
    assert torch.equal(topn_kl(s, t, 1), torch.zeros(3, 5))  # N = 1: exactly zero (renormalised)
    ref = F.kl_div(s.log_softmax(-1), t.log_softmax(-1), log_target=True, reduction="none").sum(-1)
    torch.testing.assert_close(topn_kl(s, t, 40), ref)
    torch.testing.assert_close(topn_kl(s, t, 1000), ref)  # N >= V: the full vocabulary
    assert torch.equal(topn_kl(t, t, 7), torch.zeros(3, 5)) or float(topn_kl(t, t, 7).abs().max()) < 1e-6


def test_alignment_main_head_on_the_same_target():
    """Heads built as the main head shifted by k (P^k_i := Q_{i+k}, the main head on the same target) give zero
    KL and the main head's own CE; another alignment does not."""
    torch.manual_seed(1)
    b, s, v = 2, 9, 30
    ids = torch.randint(0, v, (b, s))
    main = torch.randn(b, s, v)
    shifted = []
    for k in (1, 2, 3):
        h = torch.randn(b, s, v)
        h[:, : s - k] = main[:, k:]
        shifted.append(h)
    out = p2_loss(main, shifted, ids, P2LossConfig(topn=10))
    for k in (1, 2, 3):
        assert float(out.metrics[f"kl@{k}"]) < 1e-6 and float(out.metrics[f"agree@{k}"]) == 1.0
        ce_main = F.cross_entropy(main[:, k : s - 1].flatten(0, 1), ids[:, k + 1 :].flatten())
        assert float(out.metrics[f"ce@{k}"]) == pytest.approx(float(ce_main), rel=1e-6)
        assert aligned(shifted[k - 1], k, k).shape[1] == s - 1 - k  # S-1-k scored positions
    wrong = [torch.cat([main[:, :1], main[:, :-1]], 1)]  # P^1_i := Q_{i-1}: off by two
    assert float(p2_loss(main, wrong, ids, P2LossConfig(topn=10)).metrics["kl@1"]) > 0.1


def test_shared_main_index_set_is_each_heads_own_teacher_top_n():
    """p2_loss picks the main head's Top-N once for all heads; each head's KL equals the KL over the Top-N of its
    own teacher rows Q_{i+k} (N < V, so a misaligned index set changes the value)."""
    torch.manual_seed(4)
    ids = torch.randint(0, 40, (2, 10))
    main, heads = torch.randn(2, 10, 40), [torch.randn(2, 10, 40) for _ in range(3)]
    for cfg in (P2LossConfig(topn=6), P2LossConfig(topn=6, index="union", direction="reverse")):
        out = p2_loss(main, heads, ids, cfg)
        for k in (1, 2, 3):
            own = topn_kl(aligned(heads[k - 1], k, k), aligned(main, k, 0), 6, direction=cfg.direction, index=cfg.index)
            assert float(out.metrics[f"kl@{k}"]) == pytest.approx(float(own.mean()), rel=1e-5)


def test_ensemble_teachers_and_step_weights():
    torch.manual_seed(2)
    main, h1, h2 = torch.randn(1, 8, 5), torch.randn(1, 8, 5), torch.randn(1, 8, 5)
    (mean,) = teachers(main, [h1], 2, "ensemble_mean")  # depth 2 at i: {Q_{i+2}, P^1_{i+1}}
    torch.testing.assert_close(mean, (main[:, 2:7] + h1[:, 1:6]) / 2)
    split = teachers(main, [h1], 2, "ensemble_split")
    assert len(split) == 2 and torch.equal(split[1], h1[:, 1:6])
    ids = torch.randint(0, 5, (1, 8))
    cfg = P2LossConfig(topn=5, beta=0.5, teacher="ensemble_split")
    out = p2_loss(main, [h1, h2], ids, cfg)
    kls = [topn_kl(aligned(h2, 2, 2), t, 5).mean() for t in split]
    assert float(out.metrics["kl@2"]) == pytest.approx(float(sum(kls) / 2), rel=1e-6)  # each weighted beta / |set|
    ws = P2LossConfig(weight_schedule={"until_step": 2000, "alpha": [0.7, 0.3], "beta": [0.1, 0.5]})
    got = [w for s in (0, 1000, 2000, 3000) for w in ws.weights(s, 4)]
    assert got == pytest.approx([0.7, 0.1, 0.5, 0.3, 0.3, 0.5, 0.3, 0.5])
    assert P2LossConfig(alpha=0.3, normalize_by_heads=True).weights(0, 4)[0] == pytest.approx(0.075)


@pytest.mark.parametrize("bad", [{"topn": 0}, {"beta": -0.1}, {"direction": "sideways"}, {"alpha": -1}])
def test_bad_loss_settings(bad):
    with pytest.raises(ValueError):
        P2LossConfig(**bad)


def test_detach_stops_the_kl_at_the_main_head():
    """With detach, the KL's gradient w.r.t. the main logits is zero and the head's gradient is the same; without,
    the main head receives the KL's gradient too. CE_k's gradients do not change either way."""
    torch.manual_seed(3)
    ids = torch.randint(0, 12, (2, 7))
    base_main, base_head = torch.randn(2, 7, 12), torch.randn(2, 7, 12)

    def grads(detach: bool, beta: float):
        main, head = base_main.clone().requires_grad_(), base_head.clone().requires_grad_()
        out = p2_loss(main, [head], ids, P2LossConfig(topn=6, beta=beta, detach=detach, main_weight=0.0))
        out.loss.backward()
        return main.grad, head.grad

    m_det, h_det = grads(True, 1.0)
    m_free, h_free = grads(False, 1.0)
    m_ce, h_ce = grads(True, 0.0)
    assert m_det is None or float(m_det.abs().max()) == 0.0  # nothing reaches the main head
    assert float(m_free.abs().max()) > 1e-4
    torch.testing.assert_close(h_det, h_free)  # the student's side is the same
    assert not torch.allclose(h_det, h_ce)  # the KL does reach the head
    main, head = base_main.clone().requires_grad_(), base_head.clone().requires_grad_()
    p2_loss(main, [head], ids, P2LossConfig(topn=6, beta=0.0, detach=False, main_weight=0.0)).loss.backward()
    torch.testing.assert_close(head.grad, h_ce)


@pytest.mark.parametrize(
    "cfg",
    [
        P2LossConfig(topn=6, beta=0.5),
        P2LossConfig(topn=6, index="union", direction="hybrid"),
        P2LossConfig(topn=6, teacher="ensemble_mean"),
        P2LossConfig(topn=6, teacher="ensemble_split", detach=False),
    ],
)
def test_scored_logits_give_the_full_windows_loss(cfg):
    """Heads' logits on their scored positions only (P^k [B, S-1-k, V], what training projects) give the loss,
    metrics and gradients of whole-window logits; logits one position short of a depth's scored rows are
    refused, not read misaligned."""
    torch.manual_seed(5)
    b, s, v = 2, 9, 20
    ids = torch.randint(0, v, (b, s))
    base_main, base_heads = torch.randn(b, s, v), [torch.randn(b, s, v) for _ in range(3)]

    def run(cut: bool):
        main = base_main.clone().requires_grad_()
        heads = [h.clone().requires_grad_() for h in base_heads]
        fed = [scored(h, k) if cut else h for k, h in enumerate(heads, 1)]
        out = p2_loss(main, fed, ids, cfg)
        out.loss.backward()
        return out, main.grad, [h.grad for h in heads]

    full, m_full, h_full = run(False)
    cut, m_cut, h_cut = run(True)
    torch.testing.assert_close(cut.loss, full.loss)
    assert cut.metrics.keys() == full.metrics.keys()
    for name in full.metrics:
        torch.testing.assert_close(cut.metrics[name], full.metrics[name])
    if m_full is not None:
        torch.testing.assert_close(m_cut, m_full)
    for k, (a, g) in enumerate(zip(h_cut, h_full), 1):
        torch.testing.assert_close(a, g)
        assert float(g[:, s - 1 - k :].abs().max()) == 0.0  # unscored positions get nothing either way
    with pytest.raises(ValueError, match="positions"):
        p2_loss(base_main, [h[:, : s - 3 - k] for k, h in enumerate(base_heads, 1)], ids, cfg)

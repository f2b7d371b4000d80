"""Paper 2's total loss against its terms computed by brute force, position by position (Eqs. 1-5, App. E.2.2):
L = w_main CE(Q) + Σ_k α_k CE(P^k) + Σ_k β_k KL_k, with α and β distinct so that a dropped or swapped weight shows;
the main weight, α / K (`normalize_by_heads`), step weights and the ensemble-split teachers' β / |set| as well.
Only the public `p2_loss` is called."""

from __future__ import annotations

import math

import pytest
import torch

from mtp_core.papers.p2.losses import p2_loss
from mtp_core.papers.p2.settings import P2LossConfig

B, S, V, K, N = 2, 7, 11, 2, 4


@pytest.fixture(scope="module")
def logits():
    g = torch.Generator().manual_seed(7)
    main = torch.randn(B, S, V, generator=g) * 2
    heads = [torch.randn(B, S, V, generator=g) * 2 for _ in range(K)]
    ids = torch.randint(0, V, (B, S), generator=g)
    return main, heads, ids


def _log_softmax(xs: list[float]) -> list[float]:
    m = max(xs)
    z = math.log(sum(math.exp(x - m) for x in xs)) + m
    return [x - z for x in xs]


def _ce(row: torch.Tensor, target: int) -> float:
    return -_log_softmax(row.tolist())[target]


def _kl_topn(student: torch.Tensor, teacher: torch.Tensor) -> float:
    """Forward KL(teacher ‖ student) renormalised over the teacher's N largest logits."""
    t = teacher.tolist()
    idx = sorted(range(V), key=lambda v: -t[v])[:N]
    log_q = _log_softmax([t[v] for v in idx])
    log_p = _log_softmax([float(student[v]) for v in idx])
    return sum(math.exp(a) * (a - b) for a, b in zip(log_q, log_p))


def terms(main, heads, ids, teacher: str = "main"):
    """CE of the main head; per depth k its CE on t_{i+k+1} and its KL against its teachers (the main head on the
    same target, Q_{i+k}; ensemble split: also head j on it, P^j_{i+k-j}, each KL weighted 1 / |set|)."""
    ce_main = [_ce(main[b, i], int(ids[b, i + 1])) for b in range(B) for i in range(S - 1)]
    out = {"main": sum(ce_main) / len(ce_main)}
    for k in range(1, K + 1):
        pos = [(b, i) for b in range(B) for i in range(S - 1 - k)]
        out[f"ce@{k}"] = sum(_ce(heads[k - 1][b, i], int(ids[b, i + k + 1])) for b, i in pos) / len(pos)
        kls = []
        for b, i in pos:
            teach = [main[b, i + k]] + ([heads[j - 1][b, i + k - j] for j in range(1, k)] if teacher != "main" else [])
            kls.append(sum(_kl_topn(heads[k - 1][b, i], t) for t in teach) / len(teach))
        out[f"kl@{k}"] = sum(kls) / len(kls)
    return out


def test_total_is_main_ce_plus_alpha_ce_plus_beta_kl(logits):
    main, heads, ids = logits
    t = terms(main, heads, ids)
    for cfg, (w, alpha, beta) in [
        (P2LossConfig(alpha=0.3, beta=0.7, topn=N), (1.0, 0.3, 0.7)),
        (P2LossConfig(alpha=0.8, beta=0.2, main_weight=0.5, topn=N), (0.5, 0.8, 0.2)),
        (P2LossConfig(alpha=0.3, beta=0.0, topn=N), (1.0, 0.3, 0.0)),  # MTP: no KL term
        (P2LossConfig(alpha=0.6, beta=0.5, topn=N, normalize_by_heads=True), (1.0, 0.6 / K, 0.5)),
    ]:
        out = p2_loss(main, heads, ids, cfg)
        want = w * t["main"] + sum(alpha * t[f"ce@{k}"] + beta * t[f"kl@{k}"] for k in range(1, K + 1))
        assert float(out.loss) == pytest.approx(want, rel=1e-5)
        assert float(out.metrics["loss_main"]) == pytest.approx(t["main"], rel=1e-5)
        for k in range(1, K + 1):
            assert float(out.metrics[f"ce@{k}"]) == pytest.approx(t[f"ce@{k}"], rel=1e-5)
            assert float(out.metrics[f"kl@{k}"]) == pytest.approx(t[f"kl@{k}"], rel=1e-5)


def test_step_weights_and_ensemble_split_in_the_total(logits):
    main, heads, ids = logits
    t = terms(main, heads, ids)
    sched = {"until_step": 4, "alpha": [0.7, 0.3], "beta": [0.1, 0.5]}  # step 1: alpha 0.6, beta 0.2
    out = p2_loss(main, heads, ids, P2LossConfig(topn=N, weight_schedule=sched), step=1)
    want = t["main"] + sum(0.6 * t[f"ce@{k}"] + 0.2 * t[f"kl@{k}"] for k in range(1, K + 1))
    assert float(out.loss) == pytest.approx(want, rel=1e-5)
    split = terms(main, heads, ids, teacher="ensemble_split")
    out = p2_loss(main, heads, ids, P2LossConfig(alpha=0.3, beta=0.9, topn=N, teacher="ensemble_split"))
    want = split["main"] + sum(0.3 * split[f"ce@{k}"] + 0.9 * split[f"kl@{k}"] for k in range(1, K + 1))
    assert float(out.loss) == pytest.approx(want, rel=1e-5)

"""Paper 2's loss (§2 Eq. 1, §3.2 Eqs. 2-5, App. E Eqs. 8-10, App. E.2.2): pure functions on logits.

    L = w_main CE(Q, t) + Σ_k α_k CE(P^k, t_{+k+1}) + Σ_k β_k KL_k

Every term is a per-token mean at temperature 1; w_main = 1; α_k = 0.3 per head (literal;
`normalize_by_heads` divides by K as DeepSeek-V3's λ/K); the MTP baseline is β = 0.

**Alignment.** Over a window t_0 .. t_{S-1}, the main logits Q_i predict t_{i+1}; head k's P^k_i predicts
t_{i+k+1} and is scored for i <= S-2-k. Its teacher is the main head on the same target token: Q_{i+k} (Eq. 2
indexes both with k+1:T+1), detached by default (stop-gradient, "sg").

**Top-N KL (Eqs. 3-5).** I = TopK(Q_t, N) once per target, shared by all heads; q = softmax(Q_t[I]) and
log p = log_softmax(P^k[I]), renormalised within I (with it N = 1 gives exactly 0, matching Table 2's N = 1
row ≈ the CE-only baseline; `norm: full` takes the full-vocabulary softmax, then selects). Directions: `forward` =
Σ_I q (log q - log p) = KL(teacher ‖ student), PyTorch's `kl_div` order; `reverse` (Eq. 8) = Σ_I p (log p -
log q); `hybrid` = w forward + (1 - w) reverse, w = 0.5. `index: union` ("10000×2") = TopK(Q, N) ∪
TopK(P^k, N), chosen without gradient, softmax masked to the union.

**Teachers (App. E.2.2).** `main`; `ensemble_mean`: head k's teacher is the uniform mean of the logits of
{main, heads 1..k-1} on the same target (Q_{i+k}, P^1_{i+k-1}, .., P^{k-1}_{i+1}), detached; `ensemble_split`:
one KL per teacher of that set, each weighted β_k / |set|. `weight_schedule` ("step weights"): α and β move
linearly from their first to their second value over the first `until_step` steps (0.7 -> 0.3, 0.1 -> 0.5).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from ...train.losses import token_cross_entropy
from .settings import P2LossConfig


def topn_kl(
    student: torch.Tensor,
    teacher: torch.Tensor,
    topn: int,
    *,
    direction: str = "forward",
    index: str = "main",
    norm: str = "renormalize",
    detach: bool = True,
    hybrid_weight: float = 0.5,
    idx: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-position KL between teacher and student logits [..., V] over the Top-N index set (module docstring).
    `idx` [..., N]: the teacher's Top-N indices when the caller has them (`topn_index`)."""
    t = (teacher.detach() if detach else teacher).float()
    s = student.float()
    n = min(int(topn), s.shape[-1])
    if idx is None:
        idx = topn_index(t, n)
    if index == "main":
        if norm == "renormalize":
            log_q, log_p = F.log_softmax(t.gather(-1, idx), -1), F.log_softmax(s.gather(-1, idx), -1)
        else:
            log_q, log_p = F.log_softmax(t, -1).gather(-1, idx), F.log_softmax(s, -1).gather(-1, idx)
        keep = None
    else:
        with torch.no_grad():
            keep = torch.zeros_like(s, dtype=torch.bool)
            keep.scatter_(-1, idx, True)
            keep.scatter_(-1, topn_index(s, n), True)
        if norm == "renormalize":
            log_q = F.log_softmax(t.masked_fill(~keep, float("-inf")), -1)
            log_p = F.log_softmax(s.masked_fill(~keep, float("-inf")), -1)
        else:
            log_q, log_p = F.log_softmax(t, -1), F.log_softmax(s, -1)

    def kl(log_a: torch.Tensor, log_b: torch.Tensor) -> torch.Tensor:  # Σ a (log a - log b) over the index set
        if keep is None:
            return (log_a.exp() * (log_a - log_b)).sum(-1)
        # outside the union both are -inf: zero them before the product, whose gradient would be 0 * nan there
        log_a, log_b = log_a.masked_fill(~keep, 0.0), log_b.masked_fill(~keep, 0.0)
        return (log_a.exp() * (log_a - log_b)).masked_fill(~keep, 0.0).sum(-1)

    if direction == "forward":
        return kl(log_q, log_p)
    if direction == "reverse":
        return kl(log_p, log_q)
    return hybrid_weight * kl(log_q, log_p) + (1.0 - hybrid_weight) * kl(log_p, log_q)


def topn_index(logits: torch.Tensor, topn: int) -> torch.Tensor:
    """The indices of the `topn` largest logits [..., N], chosen without gradient. Unordered: every use of the set
    is order-free (a gather then a softmax, or a mask), and an unsorted top-k costs about half a sorted one."""
    with torch.no_grad():
        return logits.topk(min(int(topn), logits.shape[-1]), dim=-1, sorted=False).indices


def head_targets(ids: torch.Tensor, k: int) -> torch.Tensor:
    """Targets of depth k (k = 0: the main head) over a window [B, S]: t_{i+k+1} for i <= S-2-k."""
    return ids[:, k + 1 :]


def aligned(logits: torch.Tensor, k: int, j: int, s: int | None = None) -> torch.Tensor:
    """Depth j's logits [B, >= S-1-j, V] (j = 0: main) at the positions whose target is depth k's: i + k - j
    for i <= S-2-k, i.e. P^j on t_{i+k+1}; S = `s` (default: the logits' length). Logits that hold only depth
    j's scored rows (`scored`) and need no shift come back as they are: no copy, no slice in the backward."""
    s = logits.shape[1] if s is None else s
    lo, hi = k - j, s - 1 - j
    if hi > logits.shape[1]:
        raise ValueError(f"depth {j} logits hold {logits.shape[1]} positions, a window of {s} needs {hi}")
    return logits if lo == 0 and hi == logits.shape[1] else logits[:, lo:hi]


def scored(h: torch.Tensor, k: int) -> torch.Tensor:
    """Depth k's rows of a window [B, S, ...] that have a target in it (i <= S-2-k): project logits only there
    (contiguous, so that the projection is one matrix product)."""
    return h[:, : h.shape[1] - 1 - k].contiguous()


def teachers(
    main: torch.Tensor, heads: Sequence[torch.Tensor], k: int, kind: str, s: int | None = None
) -> list[torch.Tensor]:
    """Teacher logits of depth k (1-based) on its targets: the main head, or {main, heads 1..k-1} (ensembles).
    `heads[j-1]` = depth j's logits, for every j < k an ensemble needs; `s` the window length (`aligned`)."""
    s = main.shape[1] if s is None else s
    out = [aligned(main, k, 0, s)]
    if kind != "main":
        out += [aligned(heads[j - 1], k, j, s) for j in range(1, k)]
    return compose_teachers(out, kind)


def compose_teachers(rows: list[torch.Tensor], kind: str) -> list[torch.Tensor]:
    """The teachers of one depth from its teacher set's logits on its targets ([main, heads 1..k-1]): each one
    (`main`, `ensemble_split`), or their uniform mean (`ensemble_mean`)."""
    if kind == "ensemble_mean":
        return [torch.stack([x.float() for x in rows]).mean(0)]
    return rows


def check_teachers(cfg: P2LossConfig, k: int, depths: Any) -> None:
    """An ensemble teacher of depth k needs the logits of every depth 1..k-1 (`depths`: those at hand)."""
    if cfg.teacher != "main" and any(j not in depths for j in range(1, k)):
        raise ValueError(f"an ensemble teacher of depth {k} needs the logits of depths 1..{k - 1}")


def depth_terms(
    student: torch.Tensor,
    target: torch.Tensor,
    teach: Sequence[torch.Tensor],
    idx: torch.Tensor | None,
    teacher_pred: torch.Tensor,
    cfg: P2LossConfig,
    beta: float,
    reduce: Any = torch.mean,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(CE_k, KL_k, agree, acc) of depth k's rows, each reduced over the rows by `reduce` (mean: a window batch;
    sum: a chunk of one, `chunked`): `student` its logits on its targets `target`, `teach` its teachers there
    (`compose_teachers`; KL_k is their mean: `ensemble_split` weights each β / |set|), `idx` the main head's Top-N
    there (None: each teacher's own), `teacher_pred` the main head's argmax there."""
    ce = reduce(token_cross_entropy(student, target))
    kls = []
    with torch.set_grad_enabled(torch.is_grad_enabled() and beta > 0):
        for t in teach:
            kls.append(
                reduce(
                    topn_kl(
                        student,
                        t,
                        cfg.topn,
                        direction=cfg.direction,
                        index=cfg.index,
                        norm=cfg.norm,
                        detach=cfg.detach,
                        hybrid_weight=cfg.hybrid_weight,
                        idx=idx,
                    )
                )
            )
    kl = torch.stack(kls).mean()
    with torch.no_grad():
        pred = student.argmax(-1)
        agree, acc = reduce((pred == teacher_pred).float()), reduce((pred == target).float())
    return ce, kl, agree, acc


@dataclass
class P2LossOutput:
    loss: torch.Tensor
    metrics: dict[str, Any]


def p2_loss(
    main_logits: torch.Tensor,
    head_logits: Sequence[torch.Tensor],
    ids: torch.Tensor,
    cfg: P2LossConfig,
    step: int = 0,
    first_depth: int = 1,
) -> P2LossOutput:
    """The loss of one window batch: `main_logits` [B, S, V] (Q), `head_logits[k-1]` [B, S or S-1-k, V] (P^k for
    depths `first_depth` .. first_depth + len - 1, on every position or only the scored ones, `scored`; earlier
    depths are frozen and not scored: looped continued pre-training), `ids` [B, S]. Metrics per depth k: ce@k,
    kl@k, agree@k (argmax P^k = argmax of its teacher Q_{i+k}, a Megatron-style acceptance proxy), acc@k (argmax
    P^k = t_{i+k+1}); loss_main."""
    s = ids.shape[1]
    num_heads = first_depth - 1 + len(head_logits)
    alpha, beta = cfg.weights(step, num_heads)
    ce_main = token_cross_entropy(main_logits[:, :-1], head_targets(ids, 0)).mean()
    total = cfg.main_weight * ce_main
    metrics: dict[str, Any] = {"loss_main": ce_main.detach()}
    depth_logits = {first_depth + i: x for i, x in enumerate(head_logits)}
    # the main teacher's index set, once per target and shared by every head (Eq. 3)
    main_idx = topn_index(main_logits, cfg.topn) if cfg.teacher == "main" else None
    with torch.no_grad():
        main_pred = main_logits.argmax(-1)
    for k, logits in depth_logits.items():
        student = aligned(logits, k, k, s)
        target = head_targets(ids, k)
        if student.shape[1] == 0:
            continue
        check_teachers(cfg, k, depth_logits)
        teach = teachers(main_logits, [depth_logits.get(j) for j in range(1, k)], k, cfg.teacher, s)
        idx = None if main_idx is None else aligned(main_idx, k, 0, s)
        ce, kl, agree, acc = depth_terms(student, target, teach, idx, aligned(main_pred, k, 0, s), cfg, beta)
        total = total + alpha * ce + (beta * kl if beta > 0 else 0.0)
        metrics.update({f"ce@{k}": ce.detach(), f"kl@{k}": kl.detach(), f"agree@{k}": agree, f"acc@{k}": acc})
    return P2LossOutput(total, metrics)


def metric_names(first_depth: int, last_depth: int) -> list[str]:
    names = ["loss_main"]
    for k in range(first_depth, last_depth + 1):
        names += [f"ce@{k}", f"kl@{k}", f"agree@{k}", f"acc@{k}"]
    return names

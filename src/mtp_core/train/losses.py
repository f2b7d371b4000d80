"""Loss terms every paper's objective is built from: pure functions on logits, float32 math, any leading shape,
vocabulary last. Paper 1's student-forced objective (`papers.p1.losses`), the fine-tune's next-token loss
(`train.sft`) and the heads' distillation losses of papers 2 and 5 combine these; each is tested against hand
computation (`tests/unit/papers/p1/test_losses.py`)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def token_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """-log softmax(logits)[target] per position: [..., V], [...] -> [...]."""
    logp = F.log_softmax(logits.float(), dim=-1)
    return -logp.gather(-1, targets[..., None].long()).squeeze(-1)


def soft_cross_entropy(student_logits: torch.Tensor, teacher_logits: torch.Tensor) -> torch.Tensor:
    """-sum_v P_T(v) log P_S(v) per position (the teacher side is detached)."""
    p_t = F.softmax(teacher_logits.detach().float(), dim=-1)
    return -(p_t * F.log_softmax(student_logits.float(), dim=-1)).sum(-1)


def kl_divergence(student_logits: torch.Tensor, teacher_logits: torch.Tensor) -> torch.Tensor:
    """KL(P_T || P_S) per position = soft CE - H(P_T) (the teacher side is detached)."""
    logp_t = F.log_softmax(teacher_logits.detach().float(), dim=-1)
    logp_s = F.log_softmax(student_logits.float(), dim=-1)
    return (logp_t.exp() * (logp_t - logp_s)).sum(-1)


def entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of softmax(logits) per position, in nats."""
    logp = F.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(-1)

"""Paper 1 (MTP via self-distillation): the student-forced online objective (§3.3).

Paper 1, one micro-batch of a `BlockedBatch` (§4.2-4.4, `mtp_core.papers.p1.masks`):

1. **Student pass.** The student runs once on the blocked layout (dense SDPA/eager mask on CPU, flex
   `BlockMask` when the model runs flex_attention on a GPU: `attention_mask_for`). Logits are projected only at
   the supervised prediction slots (k per kept region, `BlockedBatch.pred_mask`) through HF's
   `logits_to_keep` with a boolean [B,S] mask, i.e. backbone -> gather hidden states -> `lm_head` at those
   rows only; the vocabulary projection of every other slot is never computed. Going through the model's own
   `forward` (not `model.model` + `lm_head` by hand) keeps DDP's reducer hooks and FSDP2's root unshard in
   the call path, so the same code runs wrapped.
2. **Readout.** y' = argmax of the student logits at the k slots of every region (no grad; §3.3 "deterministic
   readout"). `student_readout="sample"` samples instead (official `sample_during_train`).
3. **Student-forced teacher pass** (Eq. 2). The frozen teacher (the initial weights, §3.3 "Choice of teacher",
   §4.1) runs ONE forward, without grad, on the same layout with y'_1..y'_{k-1} written into the k-1 mask
   slots (`BlockedBatch.student_forced_inputs`), same positions and the same non-BDA mask, so teacher slot j
   gives P_T(. | GT prefix, y'_1..y'_j): all regions and all k conditionals in parallel.
4. **Objective** (`P1LossConfig.objective`):
   * `hard_teacher` (main runs, §3.3 "Hard teacher", §5.1): token-level CE of the student to the teacher's
     argmax at every supervised slot;
   * `soft_teacher` (Table 5 "Soft Teacher"): CE to the teacher distribution softmax(teacher logits), whose
     gradient is that of KL(P_T || P_S); the KL is logged;
   * `gt` (Table 4 "GT Suprv."): CE to the ground-truth next tokens; the teacher pass is skipped;
   * `eq3`: Eq. (3) literally, per region -P_T(y'|x) log P_S(y'|x) with P(y'|x) = prod_j P(y'_j | ...) and
     the teacher factor detached. Not what any paper run used (see below); kept for completeness.
   plus `prefix_weight` x the NTP loss at the GT prefix slots (Table 5 "Prefix Loss", App. A.6) and
   `entropy_weight` (beta) x the mean student entropy at the supervised slots (§5.5, the official `beta`
   runs; beta > 0 minimises entropy).

Reductions: every term is a mean over its token positions in the micro-batch. The returned `weight` (the
number of supervised MTP slots) lets the training loop average over the whole global batch by tokens
(`mtp_core.train.loop`, `loss_weighting="tokens"`), or per micro-batch as the official code does.

Where the official code differs:
* it never multiplies by P_T(y'|x): its hard/soft losses are token-level CE, as ours; `eq3` is
  the paper's formula as written;
* its prefix loss is the mean over regions of each region's mean NLL; ours is the token mean over the prefix
  slots (identical when regions have equal prefix counts, which holds except for region 0 at offset < 0 and
  the tail);
* it projects logits at every slot; ours only where a term needs them (the numbers are the same);
* its "hard self" supervision (post-paper) is not implemented.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from ...train.losses import token_cross_entropy
from .masks import BlockedBatch
from .settings import P1LossConfig

# ----------------------------------------------------------------------------------------------------------
# Eq. (3)


def sequence_weighted_nll(
    student_logits: torch.Tensor, teacher_logits: torch.Tensor, tokens: torch.Tensor
) -> torch.Tensor:
    """Eq. (3) per region: -P_T(y'|x) * log P_S(y'|x) for [R,k,V] logits and the rollout y' [R,k] -> [R].

    P(y'|x) = prod_j P(y'_j | x, y'_<j) (Eq. 2); the teacher factor is a detached weight (a "reward").
    """
    logp_s = -token_cross_entropy(student_logits, tokens).sum(-1)
    with torch.no_grad():
        p_t = torch.exp(-token_cross_entropy(teacher_logits, tokens).sum(-1))
    return -p_t * logp_s


# ----------------------------------------------------------------------------------------------------------
# configuration


# ----------------------------------------------------------------------------------------------------------
# the model-level P1 loss


def _attn_impl(model: Any) -> str:
    cfg = getattr(model, "config", None)
    if cfg is None and hasattr(model, "module"):  # a DDP wrapper
        cfg = getattr(model.module, "config", None)
    return str(getattr(cfg, "_attn_implementation", None) or "sdpa")


def _param_dtype(model: Any) -> torch.dtype:
    return next(iter(model.parameters())).dtype


def attention_mask_for(model: Any, batch: BlockedBatch, bda: bool | None = None, attention: str = "auto") -> Any:
    """The blocked mask in the form `model` takes (§4.3): one definition, three encodings.

    flex: a flex_attention `BlockMask` (GPU training; `attention="flex"`, or "auto" when the model runs
    flex_attention); sdpa: a bool [B,1,S,S] mask; eager: a float additive mask (a bool mask is silently wrong
    in eager attention).
    """
    impl = _attn_impl(model)
    if attention == "flex" or (attention == "auto" and impl == "flex_attention"):
        if impl != "flex_attention":
            raise ValueError(f"attention='flex' needs a model with attn_implementation='flex_attention', got {impl!r}")
        return batch.block_mask(bda=bda)
    if impl == "flex_attention":
        raise ValueError("the model runs flex_attention but attention='dense' was requested")
    if impl == "sdpa":
        return batch.dense_mask(bda=bda)
    return batch.dense_mask(_param_dtype(model), bda=bda)


def prefix_slot_mask(batch: BlockedBatch) -> torch.Tensor:
    """[B,S] bool: GT slots that are not prediction slots, in kept regions, with a real key (App. A.6 prefix
    NTP loss). The tail of a negative offset (region M) counts as kept when the last region is."""
    B, S = batch.input_ids.shape
    pred_any = torch.zeros(S, dtype=torch.bool, device=batch.input_ids.device)
    pred_any[batch.pred_slots.reshape(-1)] = True
    kept = torch.cat([batch.supervised, batch.supervised[:, -1:]], dim=1)  # [B, M+1]
    slot_kept = kept[:, batch.region_ids]  # [B, S]
    return (~batch.is_mask & ~pred_any)[None, :] & slot_kept & batch.valid


@dataclass
class P1LossOutput:
    """The loss, its weight (supervised MTP slots), metrics as (sum, count) pairs, and the tensors tests use.

    `student_logits`/`teacher_logits` are [R,k,V] at the R kept regions (row-major over (row, region));
    `student_tokens`/`teacher_tokens` [R,k]; `regions` [B,M] the kept-region mask they index.
    """

    loss: torch.Tensor
    weight: float
    metrics: dict[str, tuple[torch.Tensor, float]]
    student_logits: torch.Tensor
    student_tokens: torch.Tensor
    teacher_logits: torch.Tensor | None = None
    teacher_tokens: torch.Tensor | None = None
    regions: torch.Tensor | None = None
    terms: dict[str, torch.Tensor] = field(default_factory=dict)
    prefix_logits: torch.Tensor | None = None  # [n_prefix, V] at prefix_slot_mask, row-major over (row, slot)


def _readout(logits: torch.Tensor, how: str) -> torch.Tensor:
    if how == "argmax":
        return logits.argmax(-1)
    probs = F.softmax(logits.float(), dim=-1)
    return torch.multinomial(probs.reshape(-1, probs.shape[-1]), 1).reshape(probs.shape[:-1])


def p1_loss(
    student: Any,
    teacher: Any | None,
    batch: BlockedBatch,
    cfg: P1LossConfig = P1LossConfig(),  # noqa: B008  (frozen: immutable)
) -> P1LossOutput:
    """Paper 1's loss on one micro-batch (module docstring). `student` may be wrapped (DDP); `teacher` is the
    frozen initial model (ignored for objective='gt'). Autocast, if wanted, is the caller's."""
    if cfg.needs_teacher and teacher is None:
        raise ValueError(f"objective {cfg.objective!r} needs a teacher model")
    k, B = batch.k, batch.batch_size
    pred_mask = batch.pred_mask  # [B,S], supervised prediction slots in slot order == (row, region, j)
    regions = batch.supervised
    R = int(regions.sum())
    n_pred = R * k
    use_prefix = cfg.prefix_weight > 0
    prefix_mask = prefix_slot_mask(batch) if use_prefix else None
    keep = pred_mask | prefix_mask if use_prefix else pred_mask

    mask_s = attention_mask_for(student, batch, attention=cfg.attention)
    out = student(
        input_ids=batch.input_ids,
        attention_mask=mask_s,
        position_ids=batch.position_ids,
        logits_to_keep=keep,
        use_cache=False,
    )
    logits = out.logits  # [N_keep, V], row-major over kept slots
    if use_prefix:
        is_pred = pred_mask[keep]
        s_logits = logits[is_pred].reshape(R, k, -1)
        prefix_logits = logits[~is_pred]
    else:
        s_logits = logits.reshape(R, k, -1)
    gt = batch.targets[regions]  # [R,k]

    with torch.no_grad():
        s_tokens = _readout(s_logits.detach(), cfg.student_readout)
        t_logits = t_tokens = None
        if cfg.needs_teacher:
            full = torch.full((B, batch.num_regions, k), batch.mask_id, dtype=torch.long, device=s_tokens.device)
            full[regions] = s_tokens  # unkept regions keep their masks; they cannot reach a kept slot
            forced = batch.student_forced_inputs(full)
            mask_t = mask_s if not batch.bda else attention_mask_for(teacher, batch, bda=False, attention=cfg.attention)
            t_logits = teacher(
                input_ids=forced,
                attention_mask=mask_t,
                position_ids=batch.position_ids,
                logits_to_keep=pred_mask,
                use_cache=False,
            ).logits.reshape(R, k, -1)
            t_tokens = t_logits.argmax(-1)

    # one log-softmax per side, shared by the loss terms and the metrics (same values as the pure functions)
    logp_s = F.log_softmax(s_logits.float(), dim=-1)  # [R,k,V]
    logp_t = F.log_softmax(t_logits.float(), dim=-1) if t_logits is not None else None
    terms: dict[str, torch.Tensor] = {}
    if cfg.objective == "hard_teacher":
        terms["mtp"] = -logp_s.gather(-1, t_tokens[..., None]).mean()
    elif cfg.objective == "soft_teacher":
        terms["mtp"] = -(logp_t.exp() * logp_s).sum(-1).mean()
    elif cfg.objective == "gt":
        terms["mtp"] = -logp_s.gather(-1, gt[..., None]).mean()
    else:  # eq3: -P_T(y'|x) log P_S(y'|x) per region, averaged over regions
        seq_s = logp_s.gather(-1, s_tokens[..., None]).squeeze(-1).sum(-1)
        seq_t = logp_t.gather(-1, s_tokens[..., None]).squeeze(-1).sum(-1)
        terms["mtp"] = -(seq_t.exp() * seq_s).mean()
    loss = terms["mtp"]
    lp = logp_s if cfg.entropy_weight else logp_s.detach()
    ent = -(lp.exp() * lp).sum(-1)  # [R,k]
    if cfg.entropy_weight:
        terms["entropy"] = ent.mean()
        loss = loss + cfg.entropy_weight * terms["entropy"]
    n_prefix = 0
    if use_prefix:
        prefix_targets = batch.slot_targets[prefix_mask]
        n_prefix = int(prefix_targets.numel())
        if n_prefix:
            terms["prefix"] = token_cross_entropy(prefix_logits, prefix_targets).mean()
            loss = loss + cfg.prefix_weight * terms["prefix"]

    resp = batch.response_targets[regions]  # [R,k]
    metrics = _metrics(logp_s.detach(), s_tokens, logp_t, t_tokens, gt, resp, ent.detach(), terms, k, cfg)
    if use_prefix:
        metrics["prefix_tokens"] = (torch.tensor(float(n_prefix)), 1.0)
    return P1LossOutput(
        loss=loss,
        weight=float(n_pred),
        metrics=metrics,
        student_logits=s_logits,
        student_tokens=s_tokens,
        teacher_logits=t_logits,
        teacher_tokens=t_tokens,
        regions=regions,
        terms=terms,
        prefix_logits=prefix_logits if use_prefix else None,
    )


def _metrics(
    logp_s: torch.Tensor,
    s_tokens: torch.Tensor,
    logp_t: torch.Tensor | None,
    t_tokens: torch.Tensor | None,
    gt: torch.Tensor,
    resp: torch.Tensor,
    ent: torch.Tensor,
    terms: dict[str, torch.Tensor],
    k: int,
    cfg: P1LossConfig,
) -> dict[str, tuple[torch.Tensor, float]]:
    """Metrics as (sum, count), averaged over a whole step by the loop as sum(sums) / sum(counts).

    confidence = P_S(y'_j) (the ConfAdapt statistic, §4.6); acc_teacher = student argmax == teacher argmax
    (the hard-teacher accuracy); accepted_len = length of the rollout's prefix that agrees with the teacher.
    `resp` [R,k] marks the targets in the row's response: `resp_share` (and `resp@j` per position) is their
    share of the supervised targets, `confidence_resp` / `acc_teacher_resp` the statistics on them alone (a
    student trained on a prompt's header shows high numbers that say nothing about answers).
    """
    R = s_tokens.shape[0]
    n = float(R * k)
    dev = s_tokens.device
    conf = logp_s.gather(-1, s_tokens[..., None]).squeeze(-1).exp()  # [R,k]
    m: dict[str, tuple[torch.Tensor, float]] = {}
    for name, v in terms.items():
        m[f"loss_{name}"] = (v.detach() * n, n)
    m["entropy"] = (ent.sum(), n)
    m["confidence"] = (conf.sum(), n)
    m["acc_gt"] = ((s_tokens == gt).float().sum(), n)
    m["k"] = (torch.tensor(float(k), device=dev), 1.0)
    n_resp = float(resp.sum())
    m["resp_share"] = (torch.tensor(n_resp, device=dev), n)
    m["confidence_resp"] = (conf[resp].sum(), n_resp)
    m["sup_tokens"] = (torch.tensor(n, device=dev), 1.0)  # mean per micro-batch; `weight` has the step total
    if t_tokens is not None:
        agree = (s_tokens == t_tokens).float()
        m["acc_teacher"] = (agree.sum(), n)
        m["acc_teacher_resp"] = (agree[resp].sum(), n_resp)
        m["teacher_acc_gt"] = ((t_tokens == gt).float().sum(), n)
        m["teacher_confidence"] = (logp_t.amax(-1).exp().sum(), n)
        # log P_T(y'|x) per region (Eq. 2): the teacher's score of the student's rollout
        m["teacher_logprob_rollout"] = (logp_t.gather(-1, s_tokens[..., None]).sum(), float(R))
        if cfg.objective == "soft_teacher":
            m["kl"] = ((logp_t.exp() * (logp_t - logp_s)).sum(), n)
        m["accepted_len"] = (torch.cumprod(agree, dim=1).sum(), float(R))
    if cfg.per_position_metrics:
        upto = min(k, cfg.metrics_k_max)
        conf_j, resp_j = conf[:, :upto].sum(0), resp[:, :upto].float().sum(0)
        for j in range(upto):  # a loop over at most k_max positions, not over tokens
            m[f"conf@{j + 1}"] = (conf_j[j], float(R))
            m[f"resp@{j + 1}"] = (resp_j[j], float(R))
        if t_tokens is not None:
            agree_j = (s_tokens[:, :upto] == t_tokens[:, :upto]).float().sum(0)
            for j in range(upto):
                m[f"acc_teacher@{j + 1}"] = (agree_j[j], float(R))
    return m


def metric_names(
    k_max: int = 16,
    objective: str = "hard_teacher",
    prefix: bool = False,
    entropy_term: bool = False,
    per_position: bool = True,
) -> list[str]:
    """The metric columns `p1_loss` can emit for these settings (the curves CSV header)."""
    names = ["loss_mtp"]
    if entropy_term:
        names.append("loss_entropy")
    if prefix:
        names += ["loss_prefix", "prefix_tokens"]
    names += ["entropy", "confidence", "acc_gt", "k", "sup_tokens", "resp_share", "confidence_resp"]
    if objective != "gt":
        names += [
            "acc_teacher",
            "acc_teacher_resp",
            "teacher_acc_gt",
            "teacher_confidence",
            "teacher_logprob_rollout",
            "accepted_len",
        ]
        if objective == "soft_teacher":
            names.append("kl")
    if per_position:
        names += [f"conf@{j}" for j in range(1, k_max + 1)]
        names += [f"resp@{j}" for j in range(1, k_max + 1)]
        if objective != "gt":
            names += [f"acc_teacher@{j}" for j in range(1, k_max + 1)]
    return names


def ntp_loss(model: Any, input_ids: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
    """Plain next-token CE over full sequences (the baseline step of `benchmarks/p1_train_step.py`)."""
    logits = model(input_ids=input_ids, use_cache=False).logits[:, :-1]
    targets = input_ids[:, 1:]
    ce = token_cross_entropy(logits, targets)
    if lengths is None:
        return ce.mean()
    keep = torch.arange(targets.shape[1], device=targets.device)[None, :] + 1 < lengths[:, None]
    return ce[keep].mean()

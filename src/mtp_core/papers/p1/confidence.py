"""Paper 1, Figure 6 (App. A.3): the student's confidence in its own k-token rollouts against their quality,
measured by the teacher's loss on them, over held-out rows.

For every region of the P1 training layout (§4.2; fixed k, random offsets) the student proposes
y' = argmax at its k prediction slots; the frozen teacher (the base model) scores y' student-forced, in one
forward (Eq. 2, exactly the training loss's teacher pass, `mtp_core.papers.p1.losses.p1_loss`). Per region:

* `confidence`: the mean over the k positions of the student's top-1 probability P_S(y'_j) (the paper: "avg.
  probability assigned to top token in all k positions"; ConfAdapt's statistic, §4.6);
* `teacher_loss`: the mean over the k positions of -log P_T(y'_j | x, y'_<j) (lower is better);
* `accepted_len`: how many leading y'_j equal the teacher's argmax (the tokens greedy decoding would keep).

Each region also records `in_response` (all k rollout targets lie in the row's response, after its prompt) and
`context` (a hash of the row's tokens up to the region's last target, with k and the offset): `response_regions`
keeps the regions about answers, each once (rows that share a prompt's opening give identical regions), which is
what the figure shows (n in its caption).
`binned` groups regions by confidence quantile (mean and standard error of the teacher loss per bin) and
`correlations` gives Pearson and Spearman coefficients, which the figure reports.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from .losses import p1_loss
from .masks import build_blocked_batch, draw_k_offset
from .settings import P1LossConfig

COLUMNS = [
    "row",
    "region",
    "k",
    "offset",
    "confidence",
    "confidence_min",
    "teacher_loss",
    "accepted_len",
    "in_response",
    "context",
]


@torch.no_grad()
def confidence_vs_teacher_loss(
    student: Any,
    teacher: Any,
    encoded: Any,
    *,
    seq_len: int,
    num_regions: int,
    k: int,
    mask_id: int,
    pad_id: int,
    eos_ids: Sequence[int] = (),
    batch_size: int = 8,
    seed: int = 0,
) -> pd.DataFrame:
    """One row per supervised region of `encoded` (`train.EncodedRows`: padded examples, true lengths, response
    starts), columns `COLUMNS`.

    Batch b uses k and a random offset drawn by `draw_k_offset(b, random_k=False, seed=seed)`, as training
    would at a fixed k. Both models run in eval mode with the dense blocked mask.
    """
    cfg = P1LossConfig(objective="hard_teacher", attention="dense", per_position_metrics=False)
    was = student.training, teacher.training
    student.eval()
    teacher.eval()
    dev = next(student.parameters()).device
    out: list[pd.DataFrame] = []
    try:
        tokens = encoded.tokens
        for b, start in enumerate(range(0, len(tokens), batch_size)):
            _, offset = draw_k_offset(
                b, seq_len=seq_len, num_regions=num_regions, k_max=k, k_min=k, seed=seed, random_k=False
            )
            batch = build_blocked_batch(
                tokens[start : start + batch_size],
                lengths=encoded.lengths[start : start + batch_size],
                response_start=encoded.response_start[start : start + batch_size],
                k=k,
                offset=offset,
                num_regions=num_regions,
                seq_len=seq_len,
                mask_id=mask_id,
                pad_id=pad_id,
                eos_ids=eos_ids,
            )
            batch = batch.to(dev) if hasattr(batch, "to") else batch
            res = p1_loss(student, teacher, batch, cfg)
            logp_s = F.log_softmax(res.student_logits.float(), -1)
            logp_t = F.log_softmax(res.teacher_logits.float(), -1)
            y = res.student_tokens
            conf = logp_s.gather(-1, y[..., None]).squeeze(-1).exp()  # [R,k]
            t_nll = -logp_t.gather(-1, y[..., None]).squeeze(-1)  # [R,k]
            accepted = torch.cumprod((y == res.teacher_tokens).float(), dim=1).sum(1)
            rows, regions = res.regions.nonzero(as_tuple=True)  # row-major, as the loss orders regions
            last = (batch.source_index[batch.pred_slots[:, -1]] + 1).cpu()  # [M] each region's last target
            contexts = [
                hashlib.sha1(tokens[start + int(r), : int(last[g]) + 1].numpy().tobytes()).hexdigest()[:16]
                + f"-k{k}-o{offset}"
                for r, g in zip(rows.cpu(), regions.cpu())
            ]
            out.append(
                pd.DataFrame(
                    {
                        "row": (rows + start).cpu().numpy(),
                        "region": regions.cpu().numpy(),
                        "k": k,
                        "offset": offset,
                        "confidence": conf.mean(1).cpu().numpy(),
                        "confidence_min": conf.min(1).values.cpu().numpy(),
                        "teacher_loss": t_nll.mean(1).cpu().numpy(),
                        "accepted_len": accepted.cpu().numpy(),
                        "in_response": batch.response_targets[res.regions].all(1).cpu().numpy(),
                        "context": contexts,
                    }
                )
            )
    finally:
        student.train(was[0])
        teacher.train(was[1])
    return pd.concat(out, ignore_index=True)[COLUMNS] if out else pd.DataFrame(columns=COLUMNS)


def response_regions(frame: pd.DataFrame) -> pd.DataFrame:
    """The regions Figure 6 shows: those whose rollout targets all lie in the response, each context once."""
    return frame[frame["in_response"].astype(bool)].drop_duplicates("context").reset_index(drop=True)


def binned(frame: pd.DataFrame, bins: int = 10, x: str = "confidence", y: str = "teacher_loss") -> pd.DataFrame:
    """Regions grouped into `bins` quantile bins of `x` (fewer when values repeat): per bin the mean of `x`, the
    mean, standard deviation and standard error of `y`, and the count."""
    if frame.empty:
        return pd.DataFrame(columns=["bin", f"{x}_mean", f"{y}_mean", f"{y}_std", f"{y}_sem", "n"])
    codes = pd.qcut(frame[x].rank(method="first"), q=min(bins, len(frame)), labels=False)
    g = frame.groupby(codes)
    out = pd.DataFrame(
        {
            "bin": np.arange(g.ngroups),
            f"{x}_mean": g[x].mean().to_numpy(),
            f"{y}_mean": g[y].mean().to_numpy(),
            f"{y}_std": g[y].std(ddof=1).to_numpy(),
            "n": g.size().to_numpy(),
        }
    )
    out[f"{y}_sem"] = out[f"{y}_std"] / np.sqrt(out["n"])
    return out


def correlations(frame: pd.DataFrame, x: str = "confidence", y: str = "teacher_loss") -> dict[str, float]:
    """Pearson and Spearman correlation of `x` and `y` over regions (NaN with fewer than 3 regions)."""
    if len(frame) < 3:
        return {"pearson": float("nan"), "spearman": float("nan"), "n": int(len(frame))}
    return {
        "pearson": float(frame[x].corr(frame[y])),
        "spearman": float(frame[x].corr(frame[y], method="spearman")),
        "n": int(len(frame)),
    }

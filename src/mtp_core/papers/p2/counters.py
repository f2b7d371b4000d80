"""Pooled acceptance counters of D MTP heads and AR, CAR and τ from them (paper 2 App. D, Eqs. 6-7).

Counters (pooled over prompts, not per-prompt means): C_step = verification steps; A_j = steps that accepted at
least j drafts; C_j^cmp = steps that compared draft j = A_{j-1} (A_0 = C_step). AR_j = ΣA_j / ΣC_j^cmp,
CAR_j = ΣA_j / ΣC_step, so CAR_j = Π_{i<=j} AR_i, and τ = 1 + Σ_j CAR_j tokens per verification forward. The
accepted counts per step come from `acceptance.simulate_steps`; this module needs numpy only, so the table and
figure jobs read results without importing torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class HeadCounters:
    """Pooled counters of D heads: A [D], C_cmp [D], C_step."""

    accepted: np.ndarray
    compared: np.ndarray
    steps: int

    @classmethod
    def of_steps(cls, steps: Sequence[int], depths: int) -> HeadCounters:
        m = np.asarray(steps, dtype=np.int64)[:, None]
        j = np.arange(1, depths + 1)[None]
        return cls((m >= j).sum(0), (m >= j - 1).sum(0), len(steps))

    def __add__(self, other: HeadCounters) -> HeadCounters:
        return HeadCounters(self.accepted + other.accepted, self.compared + other.compared, self.steps + other.steps)

    @property
    def ar(self) -> np.ndarray:
        return self.accepted / np.maximum(self.compared, 1)

    @property
    def car(self) -> np.ndarray:
        return self.accepted / max(self.steps, 1)

    @property
    def tau(self) -> float:
        return 1.0 + float(self.car.sum())

    def as_dict(self) -> dict:
        return {
            "A": self.accepted.tolist(),
            "C_cmp": self.compared.tolist(),
            "C_step": int(self.steps),
            "ar": self.ar.tolist(),
            "car": self.car.tolist(),
            "tau": self.tau,
        }


def pooled(counters: Sequence[HeadCounters]) -> HeadCounters:
    out = counters[0]
    for c in counters[1:]:
        out = out + c
    return out


def bootstrap_diff(
    a: Sequence[HeadCounters], b: Sequence[HeadCounters], stat: str, n_boot: int = 2000, seed: int = 0
) -> dict[str, list[float]]:
    """Paired bootstrap over prompts of `stat` (ar | car) of pooled counters, b - a per depth: the difference and
    its 95 % percentile interval (the same resampled prompts for both)."""
    if len(a) != len(b) or not a:
        raise ValueError("paired bootstrap needs the same prompts on both sides")
    rng = np.random.default_rng(seed)
    acc = np.stack([[c.accepted for c in a], [c.accepted for c in b]]).astype(float)  # [2, P, D]
    cmp_ = np.stack([[c.compared for c in a], [c.compared for c in b]]).astype(float)
    stp = np.array([[c.steps for c in a], [c.steps for c in b]], dtype=float)[..., None]
    den = cmp_ if stat == "ar" else np.broadcast_to(stp, acc.shape)
    idx = rng.integers(0, len(a), size=(n_boot, len(a)))
    num_s, den_s = acc[:, idx].sum(2), den[:, idx].sum(2)  # [2, n_boot, D]
    vals = num_s / np.maximum(den_s, 1)
    diff = vals[1] - vals[0]
    point = acc.sum(1)[1] / np.maximum(den.sum(1)[1], 1) - acc.sum(1)[0] / np.maximum(den.sum(1)[0], 1)
    lo, hi = np.percentile(diff, [2.5, 97.5], axis=0)
    return {"diff": point.tolist(), "lo": lo.tolist(), "hi": hi.tolist()}

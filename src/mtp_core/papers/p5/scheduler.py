"""The inference-time tree scheduler (paper 5 §4; xikronz/entmtp `runtime_scheduler.py`): a score read off the
model each step, and a policy mapping it to a tree of the bank. Shared by the `entmtp` decoder and the offline
simulation of the scheduler (`frontier.simulate_policy`), so that the τ sweep picks what the decoder does.

**Score** (§4 "Path-value score", EAGLE-2's path value of the greedy path): p0 = the trunk's top-1 probability at
the verifier's last position (softmax at temperature 1, the distribution that produced the root); p_d = head d's
top-1 probability along the heads' own greedy chain (Hydra: head d conditioned on the root and the chain's top-1
drafts; Medusa: head d on h_t alone); g_d = p0 * prod_{i <= d} p_i. Features: `path_value_greedy_depth{d}` = g_d
(the default, d = 4, as the public code's saved HumanEval run), `base_top1_prob` = p0, `best_path_value` =
max(p0, g_1 .. g_D). Since every p_i <= 1, `best_path_value` is always p0 (the public code's default feature is
degenerate: kept, and said so, so that its runs can be reproduced). In a batch the rows' scores are reduced
(`batch_reduce`: mean, as paper 3's dynamic tree, or min).

**Policies** (`POLICIES`):
* `static` (EntMTP*): one tree.
* `binary_tau` (EntMTPτ): a conservative tree S and an aggressive tree B; start in S; in B go to S iff
  score <= τ_off, in S go to B iff score > τ_on (hysteresis; τ_off <= τ_on, equal by default: the paper's
  "single threshold is the default"). Every feature is a probability in [0, 1], so τ_on >= 1 never leaves S
  and τ_on < 0 (τ_off <= τ_on < 0 too) never leaves B: the τ sweep's two static ends, which read no score
  (`reachable`; the latter starts on B, where the rule would move at its first step anyway).
* `threshold_ladder` (EntMTP-): bank trees sorted by (nodes, depth, id), thresholds t_1 < .. < t_{n-1}
  (default i / n), tree index min(bisect_right(thresholds, score), n - 1).
* `policy_period` N: the policy is evaluated at steps 0, N, 2N, .. of a generation and keeps its tree between.
The public code's `best_depth` policy is not built: with the features above it is degenerate too (its
argmax depth is always 0).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

POLICIES = ("static", "binary_tau", "threshold_ladder")
SIGNALS = ("fresh", "stale")
REDUCE = ("mean", "min")
_PATH_VALUE = re.compile(r"^path_value_greedy_depth([1-9])$")


def feature_depth(feature: str) -> int:
    """How many heads of the greedy chain a score feature reads (0 for `base_top1_prob`); ValueError if unknown."""
    if feature == "base_top1_prob":
        return 0
    if feature == "best_path_value":
        return -1  # every depth the chain has (`score`)
    m = _PATH_VALUE.match(feature)
    if m is None:
        raise ValueError(
            f"score feature {feature!r}: one of path_value_greedy_depth<d>, base_top1_prob, best_path_value"
        )
    return int(m.group(1))


def path_values(p0: np.ndarray, chain: np.ndarray) -> np.ndarray:
    """[.., D] g_d = p0 * prod_{i <= d} p_i from p0 [..] and the chain's top-1 probabilities [.., D]."""
    return np.asarray(p0)[..., None] * np.cumprod(np.asarray(chain), axis=-1)


def score(feature: str, p0: np.ndarray, chain: np.ndarray | None) -> np.ndarray:
    """The feature's value per row (module docstring). `chain` [.., D'] holds at least the depths it reads;
    for `stale` signals with too short a chain the caller passes p0 alone (the public code's fallback)."""
    d = feature_depth(feature)
    p0 = np.asarray(p0, dtype=float)
    if d == 0:
        return p0
    g = path_values(p0, chain)
    if d < 0:
        return np.maximum(p0, g.max(-1)) if g.shape[-1] else p0
    return g[..., d - 1]


def reduce_batch(values: np.ndarray, how: str) -> float:
    """One score for a batch that shares its tree."""
    if how not in REDUCE:
        raise ValueError(f"batch_reduce {how!r} is not one of {', '.join(REDUCE)}")
    return float(np.mean(values) if how == "mean" else np.min(values))


def ladder_thresholds(n: int) -> list[float]:
    """The public code's default ladder for n trees: i / n, i = 1 .. n - 1."""
    return [i / n for i in range(1, n)]


class Policy:
    """A tree choice per step (module docstring). `trees`: bank ids in bank order; `reset()` starts a generation."""

    def __init__(
        self,
        kind: str,
        trees: Sequence[str],
        *,
        static: str | None = None,
        conservative: str | None = None,
        aggressive: str | None = None,
        tau_on: float | None = None,
        tau_off: float | None = None,
        thresholds: Sequence[float] | None = None,
        period: int = 1,
    ):
        if kind not in POLICIES:
            raise ValueError(f"policy {kind!r} is not one of {', '.join(POLICIES)}")
        if period < 1:
            raise ValueError(f"policy_period must be >= 1, got {period}")
        self.kind, self.trees, self.period = kind, list(trees), int(period)
        need = {"static": [static], "binary_tau": [conservative, aggressive], "threshold_ladder": []}[kind]
        for t in need:
            if t not in self.trees:
                raise ValueError(f"{kind}: tree {t!r} is not in the bank ({', '.join(self.trees)})")
        self.static, self.small, self.big = static, conservative, aggressive
        if kind == "binary_tau":
            if tau_on is None or tau_off is None:
                raise ValueError("binary_tau needs tau_on and tau_off")
            if tau_off > tau_on:
                raise ValueError(
                    f"binary_tau: tau_off {tau_off} > tau_on {tau_on} (hysteresis needs tau_off <= tau_on)"
                )
        self.tau_on, self.tau_off = tau_on, tau_off
        self.thresholds = list(thresholds) if thresholds is not None else ladder_thresholds(len(self.trees))
        if kind == "threshold_ladder" and len(self.thresholds) != len(self.trees) - 1:
            raise ValueError(f"threshold_ladder: {len(self.trees)} trees need {len(self.trees) - 1} thresholds")
        if any(b <= a for a, b in zip(self.thresholds, self.thresholds[1:])):
            raise ValueError(f"threshold_ladder: thresholds {self.thresholds} are not increasing")
        self.reset()

    @property
    def reachable(self) -> list[str]:
        """The trees this policy can choose (binary τ with τ_on >= 1: S alone, as no score exceeds 1; with
        τ_on < 0: B alone, as no score is below 0)."""
        if self.kind == "static":
            return [self.static]
        if self.kind == "binary_tau":
            if self.tau_on >= 1.0:
                return [self.small]
            if self.tau_on < 0.0:
                return [self.big]
            return list(dict.fromkeys([self.small, self.big]))
        return list(self.trees)

    @property
    def needs_score(self) -> bool:
        return len(self.reachable) > 1

    @property
    def scores_now(self) -> bool:
        """Whether this step's `choose` reads a score (a policy that can switch, at a step of its period)."""
        return self.needs_score and self.step % self.period == 0

    def reset(self) -> None:
        self.step = 0
        start = {"static": self.static, "binary_tau": self.small, "threshold_ladder": self.trees[0]}[self.kind]
        self.current = self.big if self.kind == "binary_tau" and self.reachable == [self.big] else start

    def params(self) -> dict[str, Any]:
        """This policy as `entmtp` decoder parameters (`policy_from_params` builds it back)."""
        out: dict[str, Any] = {"policy": self.kind, "policy_period": self.period}
        if self.kind == "static":
            out["tree"] = self.static
        elif self.kind == "binary_tau":
            out.update(conservative=self.small, aggressive=self.big, tau_on=self.tau_on, tau_off=self.tau_off)
        else:
            out["thresholds"] = list(self.thresholds)
        return out

    def choose(self, value: float | None) -> str:
        """The tree of this step given the score (ignored by `static` and between policy periods)."""
        if self.scores_now:
            if value is None:
                raise ValueError(f"{self.kind} needs a score")
            if self.kind == "binary_tau":
                if self.current == self.big:
                    self.current = self.small if value <= self.tau_off else self.big
                else:
                    self.current = self.big if value > self.tau_on else self.small
            else:
                idx = min(bisect.bisect_right(self.thresholds, value), len(self.trees) - 1)
                self.current = self.trees[idx]
        self.step += 1
        return self.current


def policy_from_params(
    params: Mapping[str, Any], trees: Sequence[str], settings: Mapping[str, Any]
) -> tuple[Policy, str]:
    """The policy and score feature an `entmtp` decoder runs: its parameters over its bank's `settings` (what the
    bank file chose on calibration prompts): `policy` (default binary_tau), `tree` / `conservative` /
    `aggressive` (default the bank's best / S / B), `tau` or `tau_on` / `tau_off`, `thresholds`, `policy_period`,
    `score_feature`."""
    s = settings
    tau_on = params.get("tau_on", params.get("tau", s.get("tau_on")))
    tau_off = params.get("tau_off", params.get("tau", s.get("tau_off", tau_on)))
    policy = Policy(
        params.get("policy", "binary_tau"),
        trees,
        static=params.get("tree", s.get("best")),
        conservative=params.get("conservative", s.get("conservative")),
        aggressive=params.get("aggressive", s.get("aggressive")),
        tau_on=None if tau_on is None else float(tau_on),
        tau_off=None if tau_off is None else float(tau_off),
        thresholds=params.get("thresholds", s.get("thresholds")),
        period=int(params.get("policy_period", s.get("policy_period", 1))),
    )
    feature = str(params.get("score_feature", s.get("score_feature", "path_value_greedy_depth4")))
    feature_depth(feature)
    return policy, feature

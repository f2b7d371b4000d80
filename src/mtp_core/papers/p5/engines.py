"""What the frontier pipeline (`stages.task_frontier`) asks of a decoding engine (paper 5 §3-§4): Algorithm 1's
history rows for one depth cap, and a `Run` of a tree or a scheduler policy over the calibration prompts (per
prompt and step the tree, the accept length and whether the policy read a score; the tokens; the wall clock where
the engine decoded). The debiasing, the throughput frontier and the τ and ladder sweeps are runs, priced by
`throughput`. Two engines, the choice following the decoding regime (`P5Plan.search_engine`):

* `OfflineEngine` (temperature 0, greedy acceptance): the exact simulation on the calibration table,
  no forward. A decode at T 0 emits the trunk's greedy continuation whatever the tree, so every run reads the
  same table.
* `rollout.RolloutEngine` (the paper's own, any regime; needed at T > 0, where the text depends on the tree): the
  union-tree rollout per added node, and real decodes with the `entmtp` decoder for every run.

Both search with the one greedy loop of Algorithm 1 (`frontier.greedy_loop`), differing in its scorer only.
Accept lengths are capped as the simulation caps them (the bonus token stays within the continuation), so both
engines give the same numbers at temperature 0 (tested).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from .bank import Paths
from .calibration import PromptTable
from .frontier import States, accept_all, greedy_search
from .scheduler import Policy, feature_depth, score


@dataclass
class Run:
    """One decode (real or simulated) of every calibration prompt with one policy over a bank."""

    trees: list[list[str]]  # per prompt: the tree id of each step
    accepts: list[list[int]]  # per prompt: each step's accept length (bonus excluded, capped)
    scored: list[list[bool]]  # per prompt: whether the step's choice read a score (the chain was computed)
    tokens: list[int]  # per prompt: tokens emitted, the prefill's first one included
    drafting: bool = True  # False: every tree the policy can reach is the root alone (no head calls at all)
    seconds: float | None = None  # measured wall clock of the decode (prefill included), where it decoded
    extra: dict = field(default_factory=dict)

    @property
    def n_steps(self) -> int:
        return int(sum(len(a) for a in self.accepts))

    @property
    def mean_accept(self) -> float:
        flat = [a for acc in self.accepts for a in acc]
        return float(np.mean(flat)) if flat else 0.0

    def share(self, ids: Sequence[str]) -> dict[str, float]:
        """The fraction of steps on each tree."""
        flat = [t for tr in self.trees for t in tr]
        return {i: float(np.mean([t == i for t in flat])) if flat else 0.0 for i in ids}

    def forwards(self) -> list[int]:
        """Per prompt: forwards of the decode (prefill + steps)."""
        return [1 + len(a) for a in self.accepts]


class Engine(Protocol):
    name: str

    def search(self, depth_cap: int, stop_at: int) -> list[dict]:
        """Algorithm 1's history rows for one depth cap (`frontier.greedy_loop`'s)."""

    def run(self, bank: Mapping[str, Paths], policy: Policy, feature: str) -> Run:
        """Every calibration prompt decoded with `policy` over `bank` (batch 1: the scheduler's protocol)."""


def static_policy(tree_id: str) -> Policy:
    return Policy("static", [tree_id], static=tree_id)


class OfflineEngine:
    """The exact simulation at temperature 0 on a calibration table (module docstring)."""

    name = "offline"

    def __init__(self, table: Sequence[PromptTable], max_children: int, n_skipped: int = 0):
        self.table, self.max_children, self.n_skipped = list(table), max_children, n_skipped
        self.states = States.of(self.table)

    def search(self, depth_cap: int, stop_at: int) -> list[dict]:
        states = States.of(self.table, depth_cap)
        return greedy_search(states, depth_cap, stop_at, self.max_children, self.n_skipped)

    def run(self, bank: Mapping[str, Paths], policy: Policy, feature: str) -> Run:
        """The scheduler simulated step by step (fresh signal, batch 1): exact at temperature 0, where the
        decoder's choices follow from the same p0 and chain probabilities (`test_p5_simulation`)."""
        states = self.states
        accepts = {tid: accept_all(states, paths) for tid, paths in bank.items()}
        depth = feature_depth(feature)
        chain_d = states.codes.shape[1] if depth < 0 else depth
        trees, accs, scored = [], [], []
        for p, (s0, n) in enumerate(zip(states.start, states.lengths)):
            t = self.table[p]
            policy.reset()
            tr, ac, sc = [], [], []
            i = 0
            while i < n - 1:
                evaluate = policy.scores_now
                value = float(score(feature, t.p0[i], t.chain[i, :chain_d])) if evaluate else None
                tid = policy.choose(value)
                a = int(accepts[tid][s0 + i])
                tr.append(tid)
                ac.append(a)
                sc.append(evaluate)
                i += a + 1
            trees.append(tr)
            accs.append(ac)
            scored.append(sc)
        drafting = any(bank[tid] for tid in policy.reachable)
        return Run(trees, accs, scored, [t.n for t in self.table], drafting)

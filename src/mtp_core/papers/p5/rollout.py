"""The paper's union-tree rollout engine (§3.1 Algorithm 1 and §3.1.1 as entmtp `optimize_greedy_trees.py` and
`pareto_self_rollouts.py` run them), for temperature > 0 (the paper's typical acceptance at T 0.7), where the
offline rank tables of `frontier` are not exact: the text depends on the tree.

One search iteration decodes every calibration prompt once with the union tree T u F(T): the heads draft all of
it, the verifier runs it in one forward, and only T's nodes may be accepted (`allowed`: the reference's
`max_accepts`), so the trajectory is T's. After each verification every candidate f is scored post hoc from the
same verifier outputs: C_f = T u {f} accepts the deepest node of C_f whose path passes the acceptance rule
(`TreeVerifyResult.node_ok`, computed for every node, allowed or not). A what-if accept is capped, like the
offline simulation's, so that the bonus token stays within the generation budget (the cap counts the token
budget; a stop token inside a step is not known to it). This rollout is all the search adds (`union_iteration`,
the scorer); the greedy loop is the offline engine's (`frontier.greedy_loop`). `RolloutEngine` runs this search
and decodes every other run (a tree's own rollout for the debiasing and the throughput frontier, the τ and ladder
sweeps) with the `entmtp` decoder itself. At temperature 0 with greedy acceptance both equal the offline engine's
numbers (tested).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np
import torch

from ...decoding.base import GenerationResult, build_decoder
from ...decoding.tree import Draft, TreeState, accepted_nodes, tree_buffers
from ...models.load import LoadedModel
from .bank import BankTree, Paths, canonical
from .decoders import HeadsTreeDecoder
from .drafting import HydraStep, MedusaStep
from .engines import Run
from .frontier import Probe, greedy_loop
from .scheduler import Policy

log = logging.getLogger(__name__)


class UnionRolloutDecoder(HeadsTreeDecoder):
    """Decodes with T u candidates, accepting within T, scoring every candidate (module docstring; not
    registered: the search drives it). Params: `heads`, `tree` (T), `candidates` (paths, each outside T)."""

    PARAMS = ("tree", "candidates")

    def __init__(self, model: torch.nn.Module, tokenizer: Any, **params: Any):
        super().__init__(model, tokenizer, **params)
        base = canonical(params["tree"])
        self.cands = [tuple(c) for c in params["candidates"]]
        union = canonical(set(base) | set(self.cands))
        self.tree = BankTree("union", union, tree_buffers(union))
        self.check_tree(self.tree, "the union tree")
        node_of = {p: i + 1 for i, p in enumerate(union)}
        allowed = torch.zeros(len(union) + 1, dtype=torch.bool)
        allowed[[0, *(node_of[p] for p in base)]] = True
        self.allowed = allowed
        self.cand_nodes = torch.tensor([node_of[c] for c in self.cands], dtype=torch.long)
        self.sums = np.zeros(len(self.cands))
        self.own_sum, self.steps = 0.0, 0
        self._cap: torch.Tensor | None = None

    def choose(self, state: TreeState, step: MedusaStep | HydraStep) -> tuple[BankTree, float | None]:
        return self.tree, None

    def propose(self, state: TreeState) -> Draft:
        draft = super().propose(state)
        draft.allowed = self.allowed
        self._cap = torch.tensor([r - 1 for r in state.remaining()]).clamp(min=0)
        return draft

    def verified(self, state: TreeState) -> None:
        res, b = state.last, self.tree.buffers
        depth = b.position_ids.to(res.node_ok.device)
        acc = accepted_nodes(res.node_ok, b) & (depth[None] <= self._cap.to(depth.device)[:, None])
        own = res.num_accepted.clamp(max=self._cap.to(res.num_accepted.device))
        reach = torch.where(acc[:, self.cand_nodes.to(acc.device)], depth[self.cand_nodes.to(depth.device)], 0)
        cand = torch.maximum(own[:, None], reach)
        self.sums += cand.sum(0).cpu().numpy()
        self.own_sum += float(own.sum())
        self.steps += int(own.numel())


def union_iteration(
    loaded: LoadedModel,
    heads: Any,
    prompts: Sequence[Sequence[int]],
    tree: Paths,
    candidates: Sequence[tuple[int, ...]],
    max_new_tokens: int,
    batch_size: int = 1,
    **decode: Any,
) -> Probe:
    """The rollout scorer of Algorithm 1 (`frontier.Scorer`): one rollout of T u candidates, giving T's own mean
    accept, each candidate's what-if mean and T's steps."""
    dec = UnionRolloutDecoder(loaded.model, loaded.tokenizer, heads=heads, tree=tree, candidates=candidates, **decode)
    dec.generate_all(prompts, max_new_tokens, loaded.stop_criteria(), batch_size=batch_size)
    n = max(1, dec.steps)
    probe = Probe(dec.own_sum / n, (dec.sums / n).tolist(), dec.steps)
    log.info("union rollout of %d nodes + %d candidates: own mean accept %.4f", len(tree), len(candidates), probe.own)
    return probe


def rollout_search(
    loaded: LoadedModel,
    heads: Any,
    prompts: Sequence[Sequence[int]],
    depth_cap: int,
    stop_at: int,
    max_new_tokens: int,
    max_children: int = 10,
    batch_size: int = 1,
    n_skipped: int = 0,
    **decode: Any,
) -> list[dict]:
    """Algorithm 1 for one depth cap (`frontier.greedy_loop`) scored by one union rollout per addition."""
    score = partial(
        union_iteration, loaded, heads, prompts, max_new_tokens=max_new_tokens, batch_size=batch_size, **decode
    )
    return greedy_loop(score, depth_cap, stop_at, max_children, n_skipped)


def run_of(results: Sequence[GenerationResult], drafting: bool) -> Run:
    """A `Run` from an `entmtp` decoder's results at batch 1: per step its tree, its accept length capped so that
    the bonus token stays within the kept tokens (the simulation's cap; only a last step accepting past a stop
    or the budget is cut), whether its choice read a score; the wall clock of the decode."""
    trees, accepts, scored = [], [], []
    for g in results:
        emitted_before = np.cumsum(g.accepted)[:-1]  # tokens out before each step
        cap = (len(g.tokens) - emitted_before - 1).clip(min=0)
        accepts.append(np.minimum(np.array(g.accepted[1:], dtype=np.int64) - 1, cap).tolist())
        trees.append(list(g.extra["trees"]))
        scored.append([s is not None for s in g.extra["scores"]])
    seconds = float(sum(g.prefill_s + g.decode_s for g in results))
    return Run(trees, accepts, scored, [len(g.tokens) for g in results], drafting, seconds)


class RolloutEngine:
    """The paper's engine (`engines` module docstring): union-tree rollouts for Algorithm 1 (`batch_size` rows at a
    time: a fixed tree accepts per row), and every run a real decode of the calibration prompts with the `entmtp`
    decoder at batch 1 under the decoding regime `decode` (acceptance, temperature, posterior_threshold,
    posterior_alpha)."""

    name = "rollout"

    def __init__(
        self,
        loaded: LoadedModel,
        heads: Any,
        prompts: Sequence[Sequence[int]],
        max_new_tokens: int,
        max_children: int = 10,
        batch_size: int = 1,
        n_skipped: int = 0,
        **decode: Any,
    ):
        self.loaded, self.heads, self.prompts = loaded, heads, [list(p) for p in prompts]
        self.max_new_tokens, self.max_children, self.batch_size = max_new_tokens, max_children, batch_size
        self.n_skipped, self.decode = n_skipped, decode

    def search(self, depth_cap: int, stop_at: int) -> list[dict]:
        return rollout_search(
            self.loaded,
            self.heads,
            self.prompts,
            depth_cap,
            stop_at,
            self.max_new_tokens,
            self.max_children,
            self.batch_size,
            self.n_skipped,
            **self.decode,
        )

    def run(self, bank: Mapping[str, Paths], policy: Policy, feature: str) -> Run:
        params = {**policy.params(), "score_feature": feature, **self.decode}
        trees = {"trees": {i: [list(p) for p in t] for i, t in bank.items()}}
        dec = build_decoder("entmtp", self.loaded.model, self.loaded.tokenizer, heads=self.heads, bank=trees, **params)
        out = dec.generate_all(self.prompts, self.max_new_tokens, self.loaded.stop_criteria(), batch_size=1)
        return run_of(out, dec.drafting)

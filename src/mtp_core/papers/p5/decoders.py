"""Paper 5's decoders on the shared tree core (`decoding.tree`): `medusa` and `hydra` with a static tree (any
valid tree: a published name or Medusa choices; Medusa's default `mc_sim_7b_63`), and `entmtp`, the scheduler
over a topology bank (§4: EntMTP* static, EntMTPτ binary τ with hysteresis, EntMTP- threshold ladder).

Lossless at temperature 0 (greedy acceptance, the default: every emitted token is the trunk's argmax given the
accepted prefix); `acceptance: typical` (the paper's protocol: `temperature` 0.7, `posterior_threshold` 0.09,
`posterior_alpha` 0.3) is lossy and marks the instance so. Batches of any size (the tree core's holes and
per-row positions; Hydra's prefix cache mirrors the trunk's, `drafting`); in a batch every row drafts the same
tree, chosen from the batch's reduced score.

Parameters: `heads` (a heads directory, loaded once per model and checked against the trunk's fingerprint,
or a bound `DraftHeads`); `medusa` / `hydra`: `tree`; `entmtp`: `bank` (a bank file, `bank.TopologyBank`),
`policy` static | binary_tau | threshold_ladder, `tree` (static; default the bank's `best`, EntMTP*),
`conservative` / `aggressive` (default the bank's S and B), `tau` (sets both thresholds) or `tau_on` /
`tau_off` (default the bank's, chosen on calibration prompts), `thresholds` (ladder), `score_feature`,
`policy_period`, `batch_reduce`, `signal` fresh | stale; and `backend` (`compiled`: the trunk's forwards and the
heads on the fast decode path, `decoding.static`, Hydra's prefix layer eager).

`signal` (§4 and the public code's difference, fixed here): `fresh` (default) computes the heads' greedy chain of
THIS step before choosing the tree (the chosen tree reuses those head calls where its levels follow the chain);
`stale` reproduces the public code, which reads the head probabilities of the PREVIOUS step's proposal: none at
the first step, and only as deep as the previous tree follows the chain, the score falling back to p0 when the
feature's depth is missing (which pushes towards the aggressive tree).

A bank file records the decoding regime it was chosen under (`regime`: acceptance, and at T > 0 temperature,
posterior threshold and alpha); an `entmtp` decoder running another regime refuses it.

An `entmtp` whose every reachable tree is the root alone (`include_greedy`'s root-only tree as EntMTP*, or as S
under τ_on >= 1) decodes plain greedy steps on the tree core: no head calls, no Hydra prefix layer, no hidden
states.

Per row in `extra`: `trees` (the tree id of each verification forward) and `scores` (entmtp's batch score per
forward; None where the policy did not read one).
"""

from __future__ import annotations

import os
import weakref
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from ...decoding.base import register_decoder
from ...decoding.tree import Draft, TreeDecoder, TreeState, tree_buffers
from ...models.heads import DraftHeads, load_heads
from .bank import BankTree, TopologyBank, resolve_tree, tree_depth
from .drafting import Drafter, HydraStep, MedusaStep
from .scheduler import SIGNALS, feature_depth, policy_from_params, reduce_batch, score

DEFAULT_TREE = "mc_sim_7b_63"
_LOADED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> {heads path: bound heads}


def resolve_heads(spec: str | os.PathLike | DraftHeads, model: torch.nn.Module) -> DraftHeads:
    """Heads bound to `model`: a bound `DraftHeads` as given, or a heads directory loaded once per model (its
    trunk fingerprint checked: `heads.HeadsMismatch` on another trunk)."""
    if isinstance(spec, DraftHeads):
        return spec.bind(model)
    path = str(Path(spec).resolve())
    loaded = _LOADED.setdefault(model, {})
    if path not in loaded:
        loaded[path] = load_heads(path, model).bind(model)
    return loaded[path]


class HeadsTreeDecoder(TreeDecoder):
    """Draft with Medusa or Hydra heads, verify on the tree core; subclasses choose the tree of each step."""

    PARAMS = ("heads",)
    BACKENDS = ("eager", "compiled")  # compiled: the trunk and the heads; the prefix layer eager
    ARCHS: ClassVar[tuple[str, ...]] = ("medusa", "hydra")
    needs_hidden = True

    def __init__(self, model: torch.nn.Module, tokenizer: Any, **params: Any):
        super().__init__(model, tokenizer, **params)
        if params.get("heads") is None:
            raise ValueError(f"{self.name}: parameter `heads` (a heads directory) is required")
        self.heads = resolve_heads(params["heads"], model)
        if self.heads.arch not in self.ARCHS:
            raise ValueError(f"{self.name}: heads of arch {self.heads.arch!r}, expected {' or '.join(self.ARCHS)}")
        self.drafter = Drafter(self.heads)
        self.needs_prompt_hidden = self.drafter.needs_prompt_hidden
        self.drafting = True  # False: every tree this decoder can choose is the root alone
        self._log: dict[str, list[list[Any]]] = {}

    def stop_drafting(self) -> None:
        """Every step is a plain greedy step: skip the heads, the prefix layer and the hidden states."""
        self.drafting = False
        self.needs_hidden = self.needs_prompt_hidden = False

    def check_tree(self, tree: BankTree | tuple, what: str) -> None:
        depth = tree.depth if isinstance(tree, BankTree) else tree_depth(tree)
        if depth > self.heads.num_heads:
            raise ValueError(f"{self.name}: {what} has depth {depth}, the heads predict {self.heads.num_heads} tokens")

    def start(self, state: TreeState) -> None:
        if self.drafting:
            self.drafter.begin(state)
        self._log = {"trees": [[] for _ in state.rows], "scores": [[] for _ in state.rows]}

    def choose(self, state: TreeState, step: MedusaStep | HydraStep | None) -> tuple[BankTree, float | None]:
        raise NotImplementedError

    def propose(self, state: TreeState) -> Draft:
        if self.drafting:
            self.drafter.advance(state)
            step = self.drafter.step(state)
            tree, value = self.choose(state, step)
            draft = Draft(tree.buffers, step.propose(tree.buffers))
            self.after_propose(state, step, tree)
        else:  # every reachable tree is the root alone
            tree, value = self.choose(state, None)
            draft = Draft.empty(len(state.rows), state.ctx.root.device)
        for row in state.rows.tolist():
            self._log["trees"][row].append(tree.id)
            self._log["scores"][row].append(value)
        return draft

    def after_propose(self, state: TreeState, step: MedusaStep | HydraStep, tree: BankTree) -> None:
        """Hook after the draft of a step (the stale signal keeps what the tree's head calls saw)."""

    def row_extra(self, n: int) -> dict[str, list[Any]]:
        return {k: v[:n] for k, v in self._log.items()}


class StaticTreeDecoder(HeadsTreeDecoder):
    PARAMS = ("tree",)

    def __init__(self, model: torch.nn.Module, tokenizer: Any, **params: Any):
        super().__init__(model, tokenizer, **params)
        spec = params.get("tree", DEFAULT_TREE)
        paths = resolve_tree(spec)
        self.tree = BankTree(spec if isinstance(spec, str) else "custom", paths, tree_buffers(paths))
        self.check_tree(self.tree, f"tree {self.tree.id}")

    def choose(self, state: TreeState, step: MedusaStep | HydraStep | None) -> tuple[BankTree, float | None]:
        return self.tree, None

    def max_chunk_rows(self) -> int:
        return self.tree.buffers.num_nodes


@register_decoder("medusa")
class MedusaDecoder(StaticTreeDecoder):
    """Medusa-1 heads with a static tree (module docstring)."""

    ARCHS = ("medusa",)


@register_decoder("hydra")
class HydraDecoder(StaticTreeDecoder):
    """Hydra / Hydra++ heads with a static tree (module docstring)."""

    ARCHS = ("hydra",)


@register_decoder("entmtp")
class EntMTPDecoder(HeadsTreeDecoder):
    """EntMTP: a tree of the bank per step, chosen by the policy from the path-value score (module docstring)."""

    PARAMS = (
        "bank",
        "policy",
        "tree",
        "conservative",
        "aggressive",
        "tau",
        "tau_on",
        "tau_off",
        "thresholds",
        "score_feature",
        "policy_period",
        "batch_reduce",
        "signal",
    )

    def __init__(self, model: torch.nn.Module, tokenizer: Any, **params: Any):
        super().__init__(model, tokenizer, **params)
        if params.get("bank") is None:
            raise ValueError("entmtp: parameter `bank` (a bank file) is required")
        self.bank = TopologyBank.of(params["bank"])
        for t in self.bank.trees.values():
            self.check_tree(t, f"bank tree {t.id}")
        regime = self.bank.settings.get("regime") or {}
        if any(self.verify_kw.get(k) != v for k, v in regime.items()):
            raise ValueError(
                f"entmtp: the bank's trees and τ were chosen under {regime}, this decoder runs {self.verify_kw}: "
                "a bank chosen in one decoding regime does not hold in another"
            )
        self.policy, self.feature = policy_from_params(params, self.bank.order, self.bank.settings)
        depth = feature_depth(self.feature)
        self.chain_depth = self.heads.num_heads if depth < 0 else depth
        if self.chain_depth > self.heads.num_heads:
            raise ValueError(f"entmtp: score feature {self.feature} reads {depth} heads of {self.heads.num_heads}")
        self.reduce = str(params.get("batch_reduce", "mean"))
        self.signal = str(params.get("signal", "fresh"))
        if self.signal not in SIGNALS:
            raise ValueError(f"entmtp: signal {self.signal!r} is not one of {', '.join(SIGNALS)}")
        reduce_batch(np.zeros(1), self.reduce)  # checks the name
        if not any(self.bank[t].paths for t in self.policy.reachable):
            self.stop_drafting()

    def start(self, state: TreeState) -> None:
        super().start(state)
        self.policy.reset()

    def max_chunk_rows(self) -> int:
        """The largest tree the policy can reach."""
        return max(self.bank[t].buffers.num_nodes for t in self.policy.reachable)

    def row_scores(self, state: TreeState, step: MedusaStep | HydraStep) -> np.ndarray:
        """The score feature per live row (module docstring of `scheduler`)."""
        p0 = torch.softmax(state.last_logits.float(), dim=-1).max(-1).values.cpu().numpy()
        if self.chain_depth == 0:
            return score(self.feature, p0, None)
        if self.signal == "fresh":
            return score(self.feature, p0, step.chain(self.chain_depth))
        stale = state.data.get("stale_chain")
        need = self.chain_depth if feature_depth(self.feature) > 0 else 1
        if stale is None or stale.shape[1] < need:
            return p0  # the public code's fallback: no head probabilities of that depth from the last step
        return score(self.feature, p0, stale.numpy())

    def choose(self, state: TreeState, step: MedusaStep | HydraStep | None) -> tuple[BankTree, float | None]:
        value = None
        if self.policy.scores_now:  # over the rows still decoding (a compiled batch keeps its finished rows)
            value = reduce_batch(self.row_scores(state, step)[np.array(state.live())], self.reduce)
        return self.bank[self.policy.choose(value)], value

    def after_propose(self, state: TreeState, step: MedusaStep | HydraStep, tree: BankTree) -> None:
        if self.signal == "stale":
            state.data["stale_chain"] = torch.from_numpy(np.ascontiguousarray(step.stale_chain(tree.buffers)))

"""Paper 3: training-free multi-token prediction by embedding-space probing (mask tokens in a frozen model),
verified losslessly on the shared tree core (`decoding.tree`). Registered as `probing`.

How a step works (paper 3, Sections 2, 3.3 and Figs. 1, 3). The verification forward of step s carries the tree
`[root, draft nodes]` and, hung on EVERY node as a causal chain, `masks_per_step` = m mask tokens (extra rows of
the same forward: `Draft.extra_parents/extra_embeds`, layout `draft_trees.mask_chain_parents`). After greedy
acceptance the chain hung on the last accepted node sits at the positions of the bonus token and after it, so its
m output distributions predict the m tokens after the bonus, i.e. the children (and Top-1 grandchildren) of the
next root: "once a token is accepted, we use the mask token(s) aligned with its position to generate the next
set of future predictions". No forward is spent on drafting; the prompt forward carries the first chain
(`prefill_extra_embeds`), whose draft expands only the Top-1 token at each depth (§3.3, App. D: a chain of m
nodes); later drafts are trees within the budget. Trees and block complexity: `draft_trees` (BC = nodes + masks,
root included).

Mask embeddings (Section 3.1), built on the fly in the model's input-embedding space; one vector per row, shared
by every mask of every node ("mask tokens take the same embedding value across all token trajectories"; "pairs of
mask tokens that share parameters across positions"); `scale` multiplies it (default 1):

* `last_n`: mean of the embeddings of the last `n_last` prompt tokens (n_last = 1: the last prompt token's
  embedding; the paper's "embeddings of last n tokens" does not say how n > 1 vectors make one mask, we average).
  Re-initialised per prompt, fixed during generation; `last_n_context=True` instead takes the last n tokens of
  the current context (prompt + generated), which is the variant measured in the issue ("last prefix token").
* `gaussian`: one draw from N(mu, sigma^2) per dimension, mu / sigma the per-dimension mean / std of the
  vocabulary's embedding rows, seeded by `seed` (prompt-agnostic, so one draw serves every prompt and row).
* `prompt_mean` (the paper's choice): mean of the prompt's token embeddings, then updated with each generated
  token x_t. The published text of Eq. 4 gives no formula (it says only that alpha is "a positive scalar"); we use the
  exponential moving average e_t = (1 - alpha) e_{t-1} + alpha * emb(x_t), alpha = `alpha` (default 0.1), applied
  token by token to every emitted token (accepted drafts and bonus). alpha = 0 keeps the prompt mean.
* `vocab_mean` (not in the paper; issue 5's measured best on SmolLM2-135M: 16-18% top-1 for t+2 against 3-8%
  for the paper's three): the mean of the vocabulary's embedding rows. "Vocabulary" = the tokenizer's ids
  `0 .. len(tokenizer)-1` (capped by the matrix): rows beyond it are padding of the embedding matrix (Qwen3,
  our tiny models) that no token ever uses, and their never-trained values would bias the mean; `gaussian` uses
  the same rows.

Mask count (Sections 3.3, 4.2): mask d of a chain predicts the token d+1 positions after its anchor node, so m is
the draft depth ("takes as input the block complexity and the number of mask tokens (tree depth)"); the paper
uses m = 1 for BC 10/30 and m = 2 for BC 60. With m = 2 the second mask's candidates are the depth-2 children of
the best depth-1 candidate (Top-1 expansion).

Trees (Sections 3.3-3.5, `expansion`): `dynamic` (default, Algorithm 1: Top-1 expansion, keep the N highest
cumulative-probability trajectories, N = BC // (1 + m) - 1), `top1` (fixed counts per depth `branching`, Top-1
expansion), `fixed` (fully expanded `branching`, Medusa-style); `topk` (K) caps the candidates read from each mask
(default: as many as the budget can use). `prune` (default True) applies Section 3.5's rule. In a batch the tree
shape is shared (dynamic: by batch-mean cumulative probability) and candidates are per row.

Wall-clock guard (`adaptive`, default False; not in the paper; the shared `decoding.cost.WallClockGuard` with its
parameters): with `adaptive=True` the decoder
1. measures forward cost per chunk size once per batch size (`cost.measure_costs` on real probing chunks on the
   current cache, right after the first prefill; or takes `cost_table` {rows: cost});
2. estimates, from every verified step, the probability that the rank-j candidate of mask d is the true token
   (d >= 2 conditioned on the Top-1 chain above it being right): this batch's counts shrunk towards those of
   every call so far (`cost.ShrunkRates`, `local_prior`, `local_decay`);
3. per step, picks the number of draft nodes N (0 .. BC budget) maximising E(N) / (step cost(rows of N) +
   measured drafting overhead), E(N) = 1 + the N largest estimated slot values. The step cost per chunk size is
   the calibrated one, replaced by the wall time observed between proposals once that size (and the one-row
   step) has been used 3 times (`online_cost`, default True: robust to a calibration taken at a noisy moment on
   a shared machine). If no option beats a plain one-row greedy step by `min_gain` (0.05), it takes greedy steps
   without masks; every `probe_every` (32) greedy steps it hangs the masks on the root again (a probe step), so
   the next step can reconsider with fresh mask logits and the estimates keep growing;
4. explores until `min_obs` (32) depth-1 observations exist, with the cheapest chunk (the largest N whose padded
   chunk is the smallest).
The cost of calibration falls into the first `generate` of each batch size (benchmarks' warm-up absorbs it).

Lossless at temperature 0: every emitted token is the model's argmax given the accepted prefix (tree core).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ...decoding.base import register_decoder
from ...decoding.cost import GUARD_PARAMS, ShrunkRates, WallClockGuard, measure_costs
from ...decoding.tree import Draft, TreeBuffers, TreeDecoder, TreeState
from .draft_trees import (
    EXPANSIONS,
    ProbeCandidates,
    anchored_mask_logits,
    dynamic_counts,
    fixed_buffers,
    fixed_candidate_tokens,
    mask_chain_parents,
    nodes_for_bc,
    top1_buffers,
    top1_candidate_tokens,
    top1_candidates,
    tree_nodes,
)
from .mask_embeddings import (
    ema_update,
    last_n_mask,
    masked_mean,
    vocab_gaussian_embedding,
    vocab_mean_embedding,
    vocab_rows,
)
from .settings import STRATEGIES

# ---------------------------------------------------------------- acceptance statistics of the guard


class HitStats(ShrunkRates):
    """Counts of where the true token fell in each mask's candidate list (rank, or a miss), per depth, at the two
    horizons of `cost.ShrunkRates` (every call so far; this batch, shrunk towards it).

    Depth d >= 2 is counted only when the Top-1 chain above it was right (the only case its nodes can be
    accepted in a Top-1-expansion tree). `slot_values()` estimates the acceptance probability of every slot.
    """

    def __init__(self, depth: int, ranks: int, prior: float = 4.0, decay: float = 0.9):
        super().__init__((depth, ranks), prior, decay)

    @property
    def obs(self) -> np.ndarray:
        """[D] observations per depth (every call so far)."""
        return self.tries[:, 0]

    def observe(self, d: int, rank: int) -> None:
        """One observation at depth `d`: the true token had rank `rank` (>= ranks: a miss)."""
        hit = np.zeros(self.hits.shape[1])
        if rank < hit.size:
            hit[rank] = 1.0
        self.add(hit, np.ones_like(hit), d)

    def slot_values(self) -> np.ndarray:
        q = self.rates()
        prefix = np.concatenate([[1.0], np.cumprod(q[:-1, 0])])
        return prefix[:, None] * q

    def expected_tokens(self) -> np.ndarray:
        """[S+1] expected tokens per forward with the n = 0..S best slots (bonus token included)."""
        v = np.sort(self.slot_values().ravel())[::-1]
        return 1.0 + np.concatenate([[0.0], np.cumsum(v)])


# ---------------------------------------------------------------- the decoder


@register_decoder("probing")
class ProbingDecoder(TreeDecoder):
    """Mask-token probing with lossless tree verification (paper 3); see the module docstring.

    Params: `strategy` (prompt_mean | last_n | gaussian | vocab_mean; default prompt_mean, the paper's),
    `masks_per_step` (1 or 2), `bc` (block complexity, 30), `topk` (candidates per mask, default: the budget),
    `expansion` (dynamic | top1 | fixed), `branching` (per-depth counts for top1/fixed; default: from bc),
    `prune` (True), `alpha` (0.1), `n_last` (1), `last_n_context` (False), `scale` (1.0), `seed` (0),
    `adaptive` (False), `cost_table`, `online_cost` (True), `min_gain` (0.05), `probe_every` (32), `min_obs` (32),
    `calib_reps` (3), `local_prior` (4), `local_decay` (0.9),
    plus TreeDecoder's (`prune_finished`, `pad_small_chunks`) and `backend` (`compiled`: the mask rows ride in the
    compiled forward as input embeddings; not with `adaptive`, whose guard prices eager forwards).
    """

    lossless = True
    BACKENDS = ("eager", "compiled")  # compiled: mask rows ride as input embeddings (without the guard: `base`)
    PARAMS = (
        "strategy",
        "masks_per_step",
        "bc",
        "topk",
        "expansion",
        "branching",
        "prune",
        "alpha",
        "n_last",
        "last_n_context",
        "scale",
        "seed",
        *GUARD_PARAMS,
    )

    def __init__(self, model: torch.nn.Module, tokenizer: Any, **params: Any):
        super().__init__(model, tokenizer, **params)
        p = params
        self.strategy = str(p.get("strategy", "prompt_mean"))
        if self.strategy not in STRATEGIES:
            raise ValueError(f"probing: strategy must be one of {STRATEGIES}, got {self.strategy!r}")
        self.m = int(p.get("masks_per_step", 1))
        if self.m not in (1, 2):
            raise ValueError(f"probing: masks_per_step must be 1 or 2, got {self.m}")
        self.bc = int(p.get("bc", 30))
        self.expansion = str(p.get("expansion", "dynamic"))
        if self.expansion not in EXPANSIONS:
            raise ValueError(f"probing: expansion must be one of {EXPANSIONS}, got {self.expansion!r}")
        self.max_nodes = nodes_for_bc(self.bc, self.m)  # raises for a bc too small
        self.branching: tuple[int, ...] | None = None
        if self.expansion != "dynamic":
            br = p.get("branching")
            self.branching = tuple(int(k) for k in br) if br is not None else self._default_branching()
            if len(self.branching) != self.m or min(self.branching) < 1:
                raise ValueError(f"probing: branching must list {self.m} positive counts, got {br!r}")
            n = tree_nodes(self.branching, self.expansion)
            if n > self.max_nodes:
                raise ValueError(
                    f"probing: branching {list(self.branching)} ({self.expansion}) has {n} nodes, so "
                    f"{(n + 1) * (1 + self.m)} rows with its masks > bc={self.bc}"
                )
        topk = p.get("topk")
        need = self.max_nodes if self.branching is None else max(self.branching)
        self.topk = max(1, int(topk) if topk is not None else need)
        if self.expansion != "dynamic" and self.topk < max(self.branching):  # type: ignore[arg-type]
            raise ValueError(f"probing: topk={self.topk} < branching {list(self.branching)}")  # type: ignore
        self.prune = bool(p.get("prune", True))
        self.alpha = float(p.get("alpha", 0.1))
        if not 0.0 <= self.alpha <= 1.0:
            raise ValueError(f"probing: alpha must be in [0, 1], got {self.alpha}")
        self.n_last = int(p.get("n_last", 1))
        if self.n_last < 1:
            raise ValueError(f"probing: n_last must be >= 1, got {self.n_last}")
        self.last_n_context = bool(p.get("last_n_context", False))
        self.scale = float(p.get("scale", 1.0))
        self.seed = int(p.get("seed", 0))
        self.pad_small = bool(p.get("pad_small_chunks", True))
        self.guard = WallClockGuard(p)
        self.adaptive = self.guard.enabled
        self.stats = HitStats(self.m, self.topk, self.guard.local_prior, self.guard.local_decay)
        self._vocab_emb: torch.Tensor | None = None
        self._init_emb: torch.Tensor | None = None

    def _default_branching(self) -> tuple[int, ...]:
        """The largest tree of the chosen expansion within bc: top1 splits the nodes evenly over depths (extra
        ones to the shallow depths); fixed uses the largest equal branching, then widens depth 1."""
        n, m = self.max_nodes, self.m
        if n < m:
            raise ValueError(f"probing: bc={self.bc} leaves {n} nodes, too few for {m} depths")
        if self.expansion == "top1":
            return tuple(n // m + (1 if d < n % m else 0) for d in range(m))
        k = 1
        while tree_nodes((k + 1,) * m, "fixed") <= n:
            k += 1
        br = [k] * m
        while tree_nodes((br[0] + 1, *br[1:]), "fixed") <= n:
            br[0] += 1
        return tuple(br)

    # ------------------------------------------------------------ mask embeddings

    def _static_embedding(self) -> torch.Tensor:
        if self._vocab_emb is None:
            w = self.model.get_input_embeddings().weight.detach()
            n = vocab_rows(self.model, self.tokenizer)
            if self.strategy == "vocab_mean":
                self._vocab_emb = vocab_mean_embedding(w, n)
            else:
                self._vocab_emb = vocab_gaussian_embedding(w, n, self.seed)
        return self._vocab_emb

    def initial_embeddings(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """[B, H] the (unscaled) mask embedding of each left-padded prompt row, before any generated token."""
        b = ids.shape[0]
        if self.strategy in ("vocab_mean", "gaussian"):
            return self._static_embedding()[None].expand(b, -1).clone()
        with torch.no_grad():
            emb = self.model.get_input_embeddings()(ids).float()
        if self.strategy == "prompt_mean":
            return masked_mean(emb, mask)
        return masked_mean(emb, last_n_mask(mask, self.n_last))

    def _mask_inputs(self, e: torch.Tensor, n_rows: int) -> torch.Tensor:
        dtype = self.model.get_input_embeddings().weight.dtype
        return (e * self.scale).to(dtype)[:, None, :].expand(-1, n_rows, -1)

    def prefill_extra_embeds(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor | None:
        """The first mask chain rides in the prompt forward (its logits seed the first draft)."""
        self._init_emb = self.initial_embeddings(ids, mask)
        return self._mask_inputs(self._init_emb, self.m)

    def start(self, state: TreeState) -> None:
        b = state.ctx.batch_size
        state.data["emb"] = self._init_emb  # [B, H] float32, unscaled
        state.data["folded"] = [len(h) - 1 for h in state.history]  # history tokens folded into emb
        state.data["pend_at"] = [-1] * b  # history index of the root an unscored probe was drafted for
        state.data["pend_d"] = [0] * b  # next depth of it to score
        state.data["pend_ids"] = torch.full((b, self.m, self.topk), -1, dtype=torch.long)
        self.stats.reset_local()
        self.guard.start(b, lambda: self.calibrate(state))

    def _update_embeddings(self, state: TreeState) -> None:
        folded = state.data["folded"]
        if self.strategy == "prompt_mean" and self.alpha > 0:
            new = [h[f:] for h, f in zip(state.history, folded)]
            t = max(len(x) for x in new)
            if t:
                ids = torch.zeros(len(new), t, dtype=torch.long)
                for b, x in enumerate(new):
                    ids[b, : len(x)] = torch.tensor(x, dtype=torch.long)
                emb_layer = self.model.get_input_embeddings()
                x_emb = emb_layer(ids.to(emb_layer.weight.device)).float()
                count = torch.tensor([len(x) for x in new])
                state.data["emb"] = ema_update(state.data["emb"], x_emb, count, self.alpha)
        elif self.strategy == "last_n" and self.last_n_context:
            tail = [h[-self.n_last :] for h in state.history]
            width = max(len(x) for x in tail)
            ids = torch.zeros(len(tail), width, dtype=torch.long)
            m = torch.zeros(len(tail), width, dtype=torch.long)
            for b, x in enumerate(tail):
                ids[b, width - len(x) :] = torch.tensor(x, dtype=torch.long)
                m[b, width - len(x) :] = 1
            emb_layer = self.model.get_input_embeddings()
            state.data["emb"] = masked_mean(emb_layer(ids.to(emb_layer.weight.device)).float(), m.to(ids.device))
        state.data["folded"] = [len(h) for h in state.history]

    # ------------------------------------------------------------ acceptance statistics

    def _score_pending(self, state: TreeState) -> None:
        """Score earlier probes against the tokens emitted since (see `HitStats`)."""
        at, dd, pend = state.data["pend_at"], state.data["pend_d"], state.data["pend_ids"]
        for b, h in enumerate(state.history):
            if at[b] < 0:
                continue
            d = dd[b]
            while d < self.m and at[b] + 1 + d < len(h):
                truth = h[at[b] + 1 + d]
                ids = pend[b, d].tolist()
                rank = ids.index(truth) if truth in ids else len(ids)
                self.stats.observe(d, rank)
                d = d + 1 if rank == 0 else self.m
            if d >= self.m:
                at[b] = -1
            dd[b] = d

    def _remember(self, state: TreeState, cands: ProbeCandidates) -> None:
        ids = cands.ids
        pend = state.data["pend_ids"]
        pend.fill_(-1)
        pend[:, : ids.shape[1], : ids.shape[2]] = ids.cpu()
        state.data["pend_at"] = [len(h) - 1 for h in state.history]
        state.data["pend_d"] = [0] * len(state.history)

    # ------------------------------------------------------------ the wall-clock guard

    def max_chunk_rows(self) -> int:
        """The largest tree within `bc` with a chain of masks on every node."""
        return (self.max_nodes + 1) * (1 + self.m)

    def _rows(self, n_nodes: int) -> int:
        rows = (n_nodes + 1) * (1 + self.m)
        return 4 if self.pad_small and rows in (2, 3) else rows

    def _options(self) -> list[int]:
        """Draft-node counts the guard may choose (0 = masks on the root only)."""
        if self.branching is None:
            return list(range(self.max_nodes + 1))
        return [0, tree_nodes(self.branching, self.expansion)]

    def _dummy_draft(self, state: TreeState, n_nodes: int) -> Draft:
        b = state.ctx.batch_size
        cand = state.ctx.root[:, None].expand(b, n_nodes).clone()
        buffers = top1_buffers((n_nodes,) if n_nodes else ())
        parents = mask_chain_parents(buffers.num_nodes, self.m)
        return Draft(buffers, cand, parents, self._mask_inputs(state.data["emb"], parents.numel()))

    def calibrate(self, state: TreeState) -> dict[int, float]:
        """Seconds of one verification forward per chunk rows on the current cache (`cost.measure_costs`): a
        plain one-row step and probing chunks of several sizes."""
        opts = self._options()
        grid = sorted({n for n in (0, 1, 3, 7, 15, 31, 63) if n <= self.max_nodes} | {opts[-1]})
        drafts: dict[int, Draft | None] = {1: None}
        for n in grid:
            drafts.setdefault(self._rows(n), self._dummy_draft(state, n))
        return measure_costs(self.model, state.ctx, drafts, self.guard.calib_reps, self.pad_small)

    def _choose(self) -> tuple[str, int]:
        """('explore' | 'draft' | 'greedy', nodes) for a step whose probe logits are available."""
        opts = self._options()
        if self.stats.obs[0] < self.guard.min_obs:
            small = min(self._rows(n) for n in opts)
            return "explore", max(n for n in opts if self._rows(n) == small)
        if self.branching is None:
            e = self.stats.expected_tokens()
            expected = {n: float(e[min(n, len(e) - 1)]) for n in opts}
        else:  # the configured tree's own slots (Top-1 / full expansion approximated by rank values)
            v = self.stats.slot_values()
            n_cfg = tree_nodes(self.branching, self.expansion)
            expected = {0: 1.0, n_cfg: 1.0 + sum(float(v[d, :k].sum()) for d, k in enumerate(self.branching))}
        return self.guard.choose(expected, {n: self._rows(n) for n in expected})

    # ------------------------------------------------------------ drafting

    def build_tree(
        self,
        probe: torch.Tensor,
        root: torch.Tensor,
        depth: int | None = None,
        n_nodes: int | None = None,
        cands: ProbeCandidates | None = None,
    ) -> tuple[TreeBuffers, torch.Tensor, ProbeCandidates]:
        """The draft tree from the mask logits `probe` [B, m, V] under `root` [B]: its buffers, candidate tokens
        [B, N] and the pruned Top-K lists. `depth` caps the tree depth (tokens left); `n_nodes` overrides the
        dynamic tree's node budget (0: the bare root; the guard's choice); `cands`: `top1_candidates` if known."""
        depth = self.m if depth is None else depth
        if cands is None:
            cands = top1_candidates(probe, root, self.topk, self.prune)
        if self.expansion == "fixed":
            assert self.branching is not None
            br = self.branching[:depth] if n_nodes != 0 else ()
            return fixed_buffers(br), fixed_candidate_tokens(probe[:, :depth], root, br, self.prune), cands
        if self.branching is not None:  # top1
            counts: tuple[int, ...] = self.branching[:depth] if n_nodes != 0 else ()
        else:
            n = self.max_nodes if n_nodes is None else n_nodes
            counts = dynamic_counts(cands.slot_values()[:, :depth], n) if n else ()
        return top1_buffers(counts), top1_candidate_tokens(cands, counts), cands

    def propose(self, state: TreeState) -> Draft | None:
        t0 = self.guard.tick()
        self._update_embeddings(state)
        self._score_pending(state)
        cap = max(state.remaining()) - 1  # drafts any row can still use (the bonus fills the last slot)
        if cap <= 0:
            self.guard.done("greedy", 1)
            return None  # the last token of every row: no drafts, no masks
        if state.last is None:
            probe = state.prefill_extra_logits
        elif state.last.extra_logits is not None:
            probe = anchored_mask_logits(state.last.extra_logits, state.last.last_node, self.m)
        else:
            probe = None

        root = state.ctx.root
        cands = None
        if probe is not None:  # scored against the coming tokens whether or not this step drafts
            cands = top1_candidates(probe, root, self.topk, self.prune)
            self._remember(state, cands)
        n_nodes: int | None = None
        mode = "draft"
        if self.adaptive:
            if probe is None:  # after a greedy step: keep going greedy, re-probe every `probe_every` steps
                mode = self.guard.greedy_or_probe()  # a probe: masks on the root only, no candidates
            else:
                mode, n_nodes = self._choose()
                if mode == "greedy":
                    self.guard.greedy_run = 0
            if mode == "greedy":
                self.guard.done("greedy", 1)
                return None

        device = root.device
        if probe is None:
            empty = Draft.empty(root.shape[0], device)
            buffers, cand = empty.buffers, empty.candidates
        elif state.last is None and n_nodes != 0:  # §3.3 (App. D): the prefill's draft is the Top-1 chain
            counts = (1,) * min(self.m, cap)
            buffers, cand = top1_buffers(counts), top1_candidate_tokens(cands, counts)
        else:
            buffers, cand, _ = self.build_tree(probe, root, min(self.m, cap), n_nodes, cands)
        parents = mask_chain_parents(buffers.num_nodes, self.m)
        draft = Draft(
            buffers, cand.to(device), parents, self._mask_inputs(state.data["emb"], parents.numel()).to(device)
        )
        self.guard.done(mode, self._rows(buffers.num_nodes - 1), t0)
        return draft

    def hit_rates(self) -> dict[str, float | None]:
        """Observed rates (so far, over all calls) that the true token t+2 is the first mask's top-1 / in its
        top-K candidates (after pruning), and t+3 the second mask's top-1 given a right top-1 at t+2."""
        s = self.stats
        out: dict[str, float | None] = {"depth1_obs": float(s.obs[0])}
        out["depth1_top1"] = float(s.hits[0, 0] / s.obs[0]) if s.obs[0] else None
        out[f"depth1_top{self.topk}"] = float(s.hits[0].sum() / s.obs[0]) if s.obs[0] else None
        if self.m > 1:
            out["depth2_top1_given_depth1"] = float(s.hits[1, 0] / s.obs[1]) if s.obs[1] else None
        return out

    def describe(self) -> dict[str, Any]:
        d = super().describe()
        d["hit_rates"] = self.hit_rates()
        if self.adaptive:
            d["guard"] = {
                **self.guard.as_dict(),
                "slot_values_depth1": self.stats.slot_values()[0, :8].round(4).tolist(),
                "observations": self.stats.obs.tolist(),
            }
        return d

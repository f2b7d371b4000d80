"""N-gram drafting: lookahead's n-gram pool, STAND's logit-based n-gram memory, and the shared decoder of every
drafter whose draft is a set of token paths under the root (prompt lookup, lookahead, STAND).

`PathDraftDecoder` turns each row's paths into one tree verified by the tree core: per row the paths form a trie
(shared prefixes merged, children ranked by first appearance); the batch shares the union of the rows' tries by
child-rank path (Medusa's "choices"), each row filling its own tokens and -1 where it has no node, cut to the
block complexity (`union_tree(max_nodes=...)`). Paths are cut to the tokens a row may still emit, and the
wall-clock guard (`decoding.cost`, `adaptive=True`) picks a depth cap per step: option d keeps the nodes of
depth <= d (d = 0: a plain greedy step), with expected tokens from `DepthAcceptance` (this batch's acceptance
shrunk towards the long-run one) and chunk rows counted on this step's tree. A probe (after a run of greedy
steps) drafts to the depth whose chunk is the cheapest (for a chain: 3 tokens, 4 rows, ~1.45 greedy steps on a
CPU, against ~3 for a 29-token chain); when it is accepted, the raised batch estimate lets the next step draft
deeper.
"""

from __future__ import annotations

import heapq
from abc import abstractmethod
from collections import Counter, defaultdict
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np
import torch

from .cost import (
    GUARD_PARAMS,
    DepthAcceptance,
    WallClockGuard,
    calibration_rows,
    dummy_draft,
    measure_costs,
    padded_rows,
)
from .tree import Draft, TreeBuffers, TreeDecoder, TreeState, tree_buffers

Path = tuple[int, ...]


# ---------------------------------------------------------------- lookahead's n-gram pool


class NGramPool:
    """Lookahead decoding's n-gram pool (Fu et al. 2024, Section 3.2): n-grams keyed by their first token; each
    key keeps at most `capacity` distinct continuations (the n-gram without its first token), least recently added
    dropped first (re-adding one makes it the most recent)."""

    def __init__(self, capacity: int):
        if capacity < 1:
            raise ValueError(f"n-gram pool capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self.table: dict[int, list[Path]] = {}

    def add(self, ngram: Sequence[int]) -> None:
        key, cont = int(ngram[0]), tuple(int(t) for t in ngram[1:])
        conts = self.table.setdefault(key, [])
        if cont in conts:
            conts.remove(cont)
        elif len(conts) >= self.capacity:
            conts.pop(0)
        conts.append(cont)

    def add_sequence(self, seq: Sequence[int], n: int) -> None:
        """Add every n-gram of `seq`, in order (the last one ends up most recent)."""
        for i in range(len(seq) - n + 1):
            self.add(seq[i : i + n])

    def lookup(self, token: int) -> list[Path]:
        """Continuations of n-grams starting with `token`, most recent first."""
        return self.table.get(int(token), [])[::-1]


# ---------------------------------------------------------------- STAND's n-gram memory


class NGramMemory:
    """STAND's logit-based n-gram memory: a context of 1 .. `order`-1 tokens -> the `topk` most probable next
    tokens with probabilities and an update count k. An update with a distribution q merges as
    p <- k/(k+1) p + 1/(k+1) q (tokens absent on one side count as probability 0), keeps the `topk` largest and
    sets k <- k+1; w updates with the same q at once merge as p <- (k p + w q) / (k + w), k <- k + w. Lookup
    backs off from the longest stored context (`order`-gram) to the shortest. Entries are small (<= `topk`
    tokens), so plain Python beats tensor ops here."""

    def __init__(self, order: int = 4, topk: int = 10):
        if order < 2:
            raise ValueError(f"n-gram memory order must be >= 2, got {order}")
        self.order, self.topk = order, topk
        self.table: dict[Path, tuple[tuple[int, ...], tuple[float, ...], int]] = {}

    def _merge(self, key: Path, dist: dict[int, float], weight: int = 1) -> None:
        """Merge the distribution `dist` (token -> probability) observed `weight` times into `key`'s entry."""
        old = self.table.get(key)
        k = 0
        if old is not None:
            ids, probs, k = old
            w_old, w_new = k / (k + weight), weight / (k + weight)
            merged = {t: w_old * p for t, p in zip(ids, probs)}
            for t, p in dist.items():
                merged[t] = merged.get(t, 0.0) + w_new * p
            dist = merged
        top = sorted(dist.items(), key=lambda tp: -tp[1])[: self.topk]
        self.table[key] = (tuple(t for t, _ in top), tuple(p for _, p in top), k + weight)

    def update(self, context: Sequence[int], ids: Sequence[int], probs: Sequence[float]) -> None:
        """Fold the next-token distribution (`ids`, `probs`) after `context` into every stored context length."""
        dist = dict(zip((int(t) for t in ids), (float(p) for p in probs)))
        ctx = tuple(int(t) for t in context[max(0, len(context) - self.order + 1) :])
        for n in range(1, len(ctx) + 1):
            self._merge(ctx[len(ctx) - n :], dist)

    def add_sequence(self, seq: Sequence[int]) -> None:
        """Fold every next token of `seq` as a one-hot distribution (text without logits, e.g. the prompt). The
        one-hot updates of a context are merged at once: their running mean is the empirical next-token
        frequency (identical to one-by-one updates unless a context has more than `topk` distinct followers)."""
        seq = [int(t) for t in seq]
        counts: dict[Path, Counter[int]] = defaultdict(Counter)
        for i in range(1, len(seq)):
            for n in range(1, min(self.order - 1, i) + 1):
                counts[tuple(seq[i - n : i])][seq[i]] += 1
        for key, c in counts.items():
            total = sum(c.values())
            self._merge(key, {t: n / total for t, n in c.items()}, total)

    def lookup(self, context: Sequence[int]) -> tuple[tuple[int, ...], tuple[float, ...]] | None:
        """(ids, probs), most probable first, stored for the longest suffix of `context` present, or None."""
        ctx = tuple(int(t) for t in context[max(0, len(context) - self.order + 1) :])
        for n in range(len(ctx), 0, -1):
            hit = self.table.get(ctx[len(ctx) - n :])
            if hit is not None:
                return hit[0], hit[1]
        return None


def best_first_paths(
    memory: NGramMemory,
    context: Sequence[int],
    budget: int,
    branch: int,
    max_depth: int,
    rng: np.random.Generator | None = None,
) -> list[Path]:
    """STAND-style draft tree from the memory: up to `budget` nodes (as token paths) of highest path probability
    (product of stored probabilities), expanded best first; each node offers `branch` children, the top ones by
    stored probability, or with `rng` a Gumbel-top-k sample without replacement from the stored distribution."""
    out: list[Path] = []
    heap: list[tuple[float, int, Path]] = []
    count = 0

    def push(path: Path, value: float) -> None:
        nonlocal count
        hit = memory.lookup([*context, *path])
        if hit is None or len(path) >= max_depth:
            return
        ids, probs = hit
        order: Sequence[int] = range(min(branch, len(ids)))  # stored most probable first
        if rng is not None:
            keys = np.log(np.maximum(probs, 1e-30)) + rng.gumbel(size=len(ids))
            order = np.argsort(-keys, kind="stable")[:branch].tolist()
        for j in order:
            count += 1
            heapq.heappush(heap, (-value * probs[j], count, (*path, ids[j])))

    push((), 1.0)
    while heap and len(out) < budget:
        neg, _, path = heapq.heappop(heap)
        out.append(path)
        push(path, -neg)
    return out


# ---------------------------------------------------------------- paths -> one tree for the batch


def row_trie(paths: Sequence[Path]) -> dict[tuple[int, ...], int]:
    """One row's paths as a trie: child-rank path -> token, for every node (prefixes included), ranks by first
    appearance."""
    nodes: dict[Path, tuple[int, ...]] = {(): ()}  # token path -> rank path
    children: dict[Path, int] = {}
    out: dict[tuple[int, ...], int] = {}
    for p in paths:
        for d in range(1, len(p) + 1):
            tok_path = p[:d]
            if tok_path not in nodes:
                parent = tok_path[:-1]
                rank = children.get(parent, 0)
                children[parent] = rank + 1
                nodes[tok_path] = (*nodes[parent], rank)
                out[nodes[tok_path]] = tok_path[-1]
    return out


@lru_cache(maxsize=256)
def _buffers(choices: tuple[tuple[int, ...], ...], topk: int) -> TreeBuffers:
    return tree_buffers(choices, topk=topk)


def union_tree(rows: Sequence[Sequence[Path]], max_nodes: int | None = None) -> tuple[TreeBuffers, torch.Tensor]:
    """The shared tree of the rows' tries and the per-row candidates [B, N-1] (-1 where a row has no node).

    With `max_nodes` (the block-complexity budget, which a union of several rows' trees can exceed) the nodes
    are kept in order of their earliest position in any row's path listing (a drafter lists its best paths
    first); a parent always precedes its children there, so the kept nodes form a tree."""
    tries = [row_trie(p) for p in rows]
    first: dict[tuple[int, ...], int] = {}
    for t in tries:
        for i, c in enumerate(t):
            first[c] = min(first.get(c, i), i)
    kept = sorted(first, key=lambda c: (first[c], len(c), c))[:max_nodes]
    choices = sorted(kept, key=lambda c: (len(c), c))
    topk = 1 + max((max(c) for c in choices), default=0)
    buffers = _buffers(tuple(choices), topk)
    cand = torch.tensor([[t.get(c, -1) for c in buffers.paths] for t in tries], dtype=torch.long)
    return buffers, cand.reshape(len(rows), len(choices))


def nodes_by_depth(buffers: TreeBuffers) -> list[int]:
    """[D+1] nodes (root excluded) of the tree when cut to depth 0..D."""
    per = torch.bincount(buffers.position_ids[1:], minlength=buffers.max_depth + 1)
    return per.cumsum(0).tolist()


# ---------------------------------------------------------------- the shared decoder


class PathDraftDecoder(TreeDecoder):
    """A drafter whose per-row draft is a set of token paths under the root; see the module docstring.

    `draft_depth` bounds the paths' depth (the acceptance estimates), `max_rows` the chunk (the calibration's
    largest size). Subclasses implement `draft_paths` and may add extra rows (`extra_rows`, e.g. lookahead's
    Jacobi window), consume the last verification (`observe`), and say whether their drafts are chains
    (`chain_drafts`: the calibration then times causal chunks). Params: the guard's (`decoding.cost`) plus
    TreeDecoder's.
    """

    chain_drafts = False
    PARAMS = GUARD_PARAMS
    BACKENDS = ("eager", "compiled")  # compiled: the tree core on a static cache (without the guard: `base`)

    def __init__(self, model: torch.nn.Module, tokenizer: Any, *, draft_depth: int, max_rows: int, **params: Any):
        super().__init__(model, tokenizer, **params)
        self.pad_small = bool(params.get("pad_small_chunks", True))
        self.guard = WallClockGuard(params)
        self.draft_depth = draft_depth
        self.acceptance = DepthAcceptance(draft_depth, self.guard.local_prior, self.guard.local_decay)
        self.max_rows = max_rows

    def new_run(self) -> None:
        """Fresh acceptance statistics and exploration budget; the guard's cost tables stay (`Decoder.new_run`)."""
        self.acceptance = DepthAcceptance(self.draft_depth, self.guard.local_prior, self.guard.local_decay)
        self.guard.new_run()

    @abstractmethod
    def draft_paths(self, state: TreeState) -> list[list[Path]]:
        """Per live row, the token paths to verify under `state.ctx.root` (may be empty)."""

    def extra_rows(self, state: TreeState, n_tree: int) -> tuple[torch.Tensor, torch.Tensor]:
        """`(extra_parents [E], extra_embeds [B, E, H])` riding in a drafted step's forward after `n_tree` tree
        nodes; called only when `n_extra() > 0`."""
        raise NotImplementedError

    def n_extra(self) -> int:
        """Extra rows per drafted step (for the guard's row count)."""
        return 0

    def observe(self, state: TreeState) -> None:
        """Hook at the start of each proposal (state.last: the previous verification, None after the prefill)."""

    def start(self, state: TreeState) -> None:
        state.data["drafted"] = torch.zeros(state.ctx.batch_size, dtype=torch.long)  # depth drafted per row
        self.acceptance.reset_local()
        self.guard.start(state.ctx.batch_size, lambda: self.calibrate(state))

    def calibrate(self, state: TreeState) -> dict[int, float]:
        ctx = state.ctx
        drafts = {r: dummy_draft(ctx, r, self.chain_drafts) for r in calibration_rows(self.max_rows)}
        return measure_costs(self.model, ctx, drafts, self.guard.calib_reps, self.pad_small)

    def max_chunk_rows(self) -> int:
        return self.max_rows

    def _rows(self, n_nodes: int, extras: bool) -> int:
        return padded_rows(1 + n_nodes + (self.n_extra() if extras else 0), self.pad_small)

    def _decide(self, buffers: TreeBuffers) -> tuple[str, int]:
        """(mode, depth cap) of this step's full tree; mode 'draft' | 'explore' | 'probe' | 'greedy' (cap 0)."""
        depth = buffers.max_depth
        if not self.guard.enabled:
            return "draft", depth
        nodes = nodes_by_depth(buffers)
        full = self._rows(nodes[depth], True)
        if self.acceptance.tries[0] < self.guard.min_obs and self.guard.may_explore(full):
            return "explore", depth
        e = self.acceptance.expected_tokens()
        expected = {d: float(e[min(d, e.size - 1)]) for d in range(depth + 1)}
        rows = {d: self._rows(nodes[d], d > 0) for d in range(depth + 1)}
        mode, best = self.guard.choose(expected, rows)
        if mode == "draft" and best > 0:
            self.guard.greedy_run = 0
            return mode, best
        # a probe drafts to the deepest of the cheapest chunks (no paths: the extra rows alone, e.g. lookahead's)
        cheap = min(range(1, depth + 1), key=lambda d: (rows[d], -d)) if depth else 0
        mode = self.guard.greedy_or_probe(rows[cheap] if depth else full)
        return mode, cheap if mode == "probe" else 0

    def propose(self, state: TreeState) -> Draft | None:
        t0 = self.guard.tick()
        self.observe(state)
        drafted = state.data["drafted"]
        if state.last is not None and bool((drafted > 0).any()):
            self.acceptance.observe(drafted.numpy(), state.last.num_accepted.cpu().numpy())
        drafted.zero_()
        caps = [r - 1 for r in state.remaining()]  # drafts each row can still use (the bonus fills the last slot)
        if max(caps) <= 0:
            self.guard.done("greedy", 1)
            return None
        paths = [[p[:c] for p in row if c > 0] for row, c in zip(self.draft_paths(state), caps)]
        max_nodes = self.max_rows - 1 - self.n_extra()
        buffers, cand = union_tree(paths, max_nodes)
        mode, depth = self._decide(buffers)
        extras = mode != "greedy" and self.n_extra() > 0
        if mode == "greedy" or (depth == 0 and not extras):
            self.guard.done("greedy", 1)
            return None
        if depth < buffers.max_depth:
            buffers, cand = union_tree([[p[:depth] for p in row] for row in paths], max_nodes)
        depth_of = torch.where(cand >= 0, buffers.position_ids[1:], 0)
        drafted.copy_(torch.cat([drafted[:, None], depth_of], dim=1).amax(1))  # drafted is 0 here
        device = state.ctx.root.device
        draft = Draft(buffers, cand.to(device))
        if extras:
            parents, embeds = self.extra_rows(state, buffers.num_nodes)
            draft.extra_parents, draft.extra_embeds = parents, embeds.to(device)
        self.guard.done(mode, self._rows(buffers.num_nodes - 1, extras), t0)
        return draft

    def describe(self) -> dict[str, Any]:
        d = super().describe()
        if self.guard.enabled:
            e = self.acceptance.expected_tokens()
            d["guard"] = {**self.guard.as_dict(), "expected_tokens_by_depth": e.round(4).tolist()}
        return d

"""Lookahead decoding (Fu et al. 2024, "Break the Sequential Dependency of LLM Inference Using Lookahead
Decoding"), re-implemented on the tree core (the `lade` package does not run on transformers 5). Registered as
`lookahead`. Lossless at temperature 0: every emitted token is the model's argmax given the accepted prefix.

One forward per step carries both branches (Section 3.3, "lookahead and verification in one step"):

* Verification branch (Section 3.2): the pool's n-grams whose first token is the last emitted token (the root),
  at most G of them; their continuations (N-1 tokens each) are merged into a trie (shared prefixes verified
  once; `lade` verifies them as separate rows, the output is the same) and verified by greedy tree acceptance.
* Lookahead branch (Section 3.1): a 2D window of N-1 levels x W columns of Jacobi guesses, riding as extra rows
  (`Draft.extra_parents`) hung on the root. Level 0 is a causal chain (column c at position root+1+c); the
  token at level l >= 1, column c sits at position root+1+c+l and sees the root, level 0 up to column c and
  levels 1..l-1 of its own column: the `lade` mask, which is a tree, so the tree core's ancestor masks express
  it. Its logits are one Jacobi iteration: the top level's outputs are the newest guesses, and along each column
  the tokens of levels 0..N-2 plus the top level's output form an N-gram (a diagonal of the Jacobi trajectory),
  added to the pool (W n-grams per step).
* Window update: every level moves one level down and one column right (the positions line up), the top
  level's outputs enter at the top, column 0 of level l takes the output of level l-1 at column 0 (of the
  root for level 0); the oldest guesses drop out.
* Pool (Section 3.2): per prompt, n-grams keyed by first token, at most G continuations per key, least recently
  added dropped first (`ngram.NGramPool`).

Assumptions (not fixed by the paper): the window is kept relative to the root and not re-aligned after
acceptance (after accepting k tokens its guesses are stale by k positions; Jacobi iteration tolerates any
initial guess); it starts filled with tokens drawn uniformly from the prompt (seeded by `seed`), all levels at
once; with `pool_from_prompt` (default True, `lade`'s `POOL_FROM_PROMPT`) the pool starts with the prompt's
N-grams; the verification candidates are all the pool holds for the root (at most G), most recent first. Block
complexity (rows of one forward, paper 3) is 1 + W(N-1) + G(N-1) at most with `window`/`guess`; `bc` alone fills
its budget: W = half the whole n-grams of bc - 1 rows (rounded up), then G guesses enough to fill the rest, their
trie cut to it (BC 10/30/60 at N 3/4/5: W 2/5/7, G 3/5/8, 10/30/60 rows; lade's W = G would use 9/25/57). Batches: every row has its own window and pool; the rows' verification tries
are merged by `ngram.union_tree`.

Params: `ngram` (N, 4), `window` (W), `guess` (G), `bc` (30 when W, G are not given), `pool_from_prompt` (True),
`seed` (0), the wall-clock guard's (`decoding.cost`; option = verification depth, the lookahead branch rides
along in every drafted step), plus TreeDecoder's.
"""

from __future__ import annotations

from typing import Any

import torch

from .base import register_decoder
from .ngram import NGramPool, Path, PathDraftDecoder
from .tree import TreeState


def window_parents(levels: int, width: int) -> torch.Tensor:
    """[levels * width] parent of each window row (row l * width + c) within the window, -1 = the root."""
    c = torch.arange(width).repeat(levels)
    lev = torch.arange(levels).repeat_interleave(width)
    level0 = torch.where(c == 0, -1, c - 1)  # level 0: a chain hung on the root
    return torch.where(lev == 0, level0, (lev - 1) * width + c)


def jacobi_step(window: torch.Tensor, out: torch.Tensor, root_out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One Jacobi iteration of the window [B, L, W] (L = N-1 levels) given the model's argmax `out` [B, L, W] at
    every window row and `root_out` [B] at the root. Returns (new window [B, L, W], n-grams [B, W, N])."""
    ngrams = torch.cat([window, out[:, -1:]], dim=1).transpose(1, 2)
    new = torch.empty_like(window)
    new[:, :-1, 1:] = window[:, 1:, :-1]
    new[:, -1, 1:] = out[:, -1, :-1]
    new[:, 0, 0] = root_out
    new[:, 1:, 0] = out[:, :-1, 0]
    return new, ngrams


@register_decoder("lookahead")
class LookaheadDecoder(PathDraftDecoder):
    """Lookahead decoding on the tree core; see the module docstring."""

    lossless = True
    PARAMS = ("ngram", "window", "guess", "bc", "pool_from_prompt", "seed")

    def __init__(self, model: torch.nn.Module, tokenizer: Any, **params: Any):
        n = int(params.get("ngram", 4))
        if n < 2:
            raise ValueError(f"lookahead: ngram must be >= 2, got {n}")
        if ("window" in params) != ("guess" in params):
            raise ValueError("lookahead: give both window and guess, or neither (then bc sets them)")
        if "window" in params:
            w, g = int(params["window"]), int(params["guess"])
            bc = 1 + (w + g) * (n - 1)
            if "bc" in params and bc > int(params["bc"]):
                raise ValueError(f"lookahead: window {w} + guess {g} at ngram {n} need {bc} rows > bc={params['bc']}")
        else:
            bc = int(params.get("bc", 30))
            w = -(-((bc - 1) // (n - 1)) // 2)  # half the whole n-grams the budget holds, rounded up
            g = -(-(bc - 1 - w * (n - 1)) // (n - 1))  # guesses enough to fill the rest (the trie is cut to it)
        if w < 1 or g < 1:
            raise ValueError(f"lookahead: window and guess must be >= 1 (got {w}, {g}; bc too small for ngram={n}?)")
        self.n, self.w, self.g, self.bc = n, w, g, bc
        super().__init__(model, tokenizer, draft_depth=n - 1, max_rows=self.bc, **params)
        self.pool_from_prompt = bool(params.get("pool_from_prompt", True))
        self.seed = int(params.get("seed", 0))
        self._parents = window_parents(n - 1, w)

    def n_extra(self) -> int:
        return self.w * (self.n - 1)

    def start(self, state: TreeState) -> None:
        gen = torch.Generator().manual_seed(self.seed)
        pools, windows = [], []
        for h, plen in zip(state.history, state.prompt_lens):
            prompt = torch.tensor(h[:plen])
            windows.append(prompt[torch.randint(plen, (self.n - 1, self.w), generator=gen)])
            pool = NGramPool(self.g)
            if self.pool_from_prompt:
                pool.add_sequence(h[:plen], self.n)
            pools.append(pool)
        state.data["pool"] = pools
        state.data["window"] = torch.stack(windows)
        super().start(state)

    def observe(self, state: TreeState) -> None:
        """Fold the previous step's lookahead branch (if it ran) into the windows and pools."""
        last = state.last
        if last is None or last.extra_logits is None:
            return
        out = last.extra_logits.argmax(-1).cpu().view(-1, self.n - 1, self.w)
        window, ngrams = jacobi_step(state.data["window"], out, last.node_argmax[:, 0].cpu())
        state.data["window"] = window
        for pool, rows in zip(state.data["pool"], ngrams.tolist()):
            for ng in rows:
                pool.add(ng)

    def draft_paths(self, state: TreeState) -> list[list[Path]]:
        return [pool.lookup(t) for pool, t in zip(state.data["pool"], state.ctx.root.tolist())]

    def extra_rows(self, state: TreeState, n_tree: int) -> tuple[torch.Tensor, torch.Tensor]:
        parents = torch.where(self._parents < 0, 0, self._parents + n_tree)
        emb = self.model.get_input_embeddings()
        ids = state.data["window"].reshape(state.ctx.batch_size, -1).to(emb.weight.device)
        return parents, emb(ids)

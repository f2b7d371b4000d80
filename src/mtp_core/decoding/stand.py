"""STAND, STochastic Adaptive N-gram Drafting (Song et al. 2025, "Accelerated Test-Time Scaling with Model-Free
Speculative Sampling"), re-implemented from its description (no official code is known) on the tree core.
Registered as `stand`. Lossless at temperature 0: drafts only propose, greedy tree acceptance decides.

* Logit-based n-gram memory (`ngram.NGramMemory`): for each context of 1-3 tokens (4-gram down to 2-gram) the
  top-10 next tokens with probabilities; a new distribution merges with weight 1/(k+1), the stored one with
  k/(k+1), k = the context's update count. After each verification the model's own next-token distribution
  (softmax of the logits) at every accepted node (and, after the prefill, at the last prompt token) is folded
  in under the contexts ending at that node: the logits the step computed anyway, no extra forward.
* Lookup backs off from the longest stored context to the shortest.
* Stochastic drafting: the children of a node are a Gumbel-top-k sample (without replacement) of `branch`
  tokens from the stored distribution of its context (`sampling="gumbel"`; a generator per row seeded by `seed`
  and the row's prompt, so a row draws alike in any batch); `"topk"` takes the most probable ones.
* Tree: STAND uses a static tree fitted offline (625 candidate nodes cut to the 80 most useful on 30 AIME
  samples); we have no such calibration set, so we build the tree per step best first: the `bc` - 1 nodes of
  highest path probability (product of stored probabilities along the path, the usefulness criterion a static
  tree approximates), at most `max_depth` deep (`ngram.best_first_paths`).

Assumptions: one memory per prompt (row), started from the prompt's n-grams as one-hot distributions (prompt
positions have no logits: the prefill keeps only the last one); distributions are stored after the softmax at
temperature 1; the tree budget `bc` counts the root (block complexity = rows of the verification forward, as in
paper 3). Batches: each row has its own memory and tree; the trees are merged by `ngram.union_tree`.

Params: `bc` (30), `branch` (children per node, 4), `max_depth` (8), `order` (4), `memory_topk` (10), `sampling`
(gumbel | topk), `seed` (0), the wall-clock guard's (`decoding.cost`; option = depth cap), plus TreeDecoder's.
"""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np
import torch

from .base import register_decoder
from .ngram import NGramMemory, Path, PathDraftDecoder, best_first_paths
from .tree import TreeState

SAMPLINGS = ("gumbel", "topk")


@register_decoder("stand")
class StandDecoder(PathDraftDecoder):
    """STAND on the tree core; see the module docstring."""

    lossless = True
    PARAMS = ("bc", "branch", "max_depth", "order", "memory_topk", "sampling", "seed")
    needs_logits = True  # the model's distributions at the accepted nodes feed the memory

    def __init__(self, model: torch.nn.Module, tokenizer: Any, **params: Any):
        self.bc = int(params.get("bc", 30))
        self.branch = int(params.get("branch", 4))
        self.max_depth = int(params.get("max_depth", 8))
        self.order = int(params.get("order", 4))
        self.memory_topk = int(params.get("memory_topk", 10))
        self.sampling = str(params.get("sampling", "gumbel"))
        self.seed = int(params.get("seed", 0))
        if self.order < 2:
            raise ValueError(f"stand: order must be >= 2, got {self.order}")
        if self.bc < 2:
            raise ValueError(f"stand: bc must be >= 2 (the root and one draft), got {self.bc}")
        if min(self.branch, self.max_depth, self.memory_topk) < 1:
            raise ValueError("stand: branch, max_depth and memory_topk must be >= 1")
        if self.sampling not in SAMPLINGS:
            raise ValueError(f"stand: sampling must be one of {SAMPLINGS}, got {self.sampling!r}")
        super().__init__(model, tokenizer, draft_depth=self.max_depth, max_rows=self.bc, **params)

    def start(self, state: TreeState) -> None:
        # one generator per row, seeded by `seed` and the row's prompt: a row draws the same whatever shares its batch
        state.data["rng"] = [
            np.random.default_rng([self.seed, zlib.crc32(np.asarray(h[:plen], dtype=np.int64).tobytes())])
            for h, plen in zip(state.history, state.prompt_lens)
        ]
        memories = []
        for h, plen in zip(state.history, state.prompt_lens):
            mem = NGramMemory(self.order, self.memory_topk)
            mem.add_sequence(h[:plen])
            memories.append(mem)
        state.data["memory"] = memories
        probs, ids = self._top_probs(state.last_logits)
        for mem, h, plen, i, p in zip(memories, state.history, state.prompt_lens, ids.tolist(), probs.tolist()):
            mem.update(h[:plen], i, p)
        super().start(state)

    def observe(self, state: TreeState) -> None:
        """Fold the model's distributions at the previous step's accepted nodes into the memories."""
        last = state.last
        if last is None:
            return
        assert last.logits is not None  # needs_logits
        probs, ids = self._top_probs(last.logits)
        n_acc = last.num_accepted.tolist()
        for mem, h, k, i, p in zip(state.data["memory"], state.history, n_acc, ids.tolist(), probs.tolist()):
            end = len(h) - (k + 2)  # history index of the previous root (node 0 of the accepted path)
            for j in range(k + 1):
                mem.update(h[max(0, end + j - self.order + 2) : end + j + 1], i[j], p[j])

    def _top_probs(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(probabilities, ids) of the `memory_topk` most probable tokens (softmax without materialising it)."""
        logits = logits.float()
        top = logits.topk(self.memory_topk, dim=-1)
        return (top.values - logits.logsumexp(-1, keepdim=True)).exp(), top.indices

    def draft_paths(self, state: TreeState) -> list[list[Path]]:
        gumbel = self.sampling == "gumbel"
        ctx_len = self.order - 1
        return [
            best_first_paths(mem, h[-ctx_len:], self.bc - 1, self.branch, self.max_depth, rng if gumbel else None)
            for mem, h, rng in zip(state.data["memory"], state.history, state.data["rng"])
        ]

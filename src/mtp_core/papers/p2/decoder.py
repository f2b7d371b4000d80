"""`mtp-spec`: main-head-constrained speculative decoding with cascaded MTP heads (paper 2 App. D, Algorithm 1), on
the tree core: a chain of D drafts per step (D = K, or D > K looping the heads, §3.3), greedy acceptance and KV
commit (`decoding.tree`), lossless, any batch size.

**The same head computation as training (Algorithm 1 without its recompute).** Algorithm 1 runs every head
over every position after each verification: head k at position i reads (h^{k-1}_i, x_{i+k}), so at the last
position n-1 (x_n is the newest verified token) head k attends to its own states at positions n-k+1 .. n-2, whose
tokens x_{n+1} .. are drafts. With a per-depth KV cache the same states come from one chunk per depth and step
(`HeadCascade`): with c_k the positions depth k has made permanent, its chunk covers positions c_k .. n-1:

* permanent rows, positions c_k .. n-k: every input is verified (tokens up to x_n; h^{k-1} of earlier permanent
  rows); after m accepted drafts there are m + 1 of them (head 1's h^0 is `verify_tree`'s path `hidden`);
* temporary rows, positions n-k+1 .. n-1 (k - 1 of them): their tokens include drafts, so they are cropped from
  the cache after drafting and recomputed next step from verified inputs (stale head caches after a rejection
  would otherwise feed rejected drafts into later steps).

The draft of depth k is the argmax of `lm_head` at the chunk's last row, position n-1 (logits only there). A
cheaper loop that runs only the last row per depth (as some inference engines do) matches this for depths 1-2
only; it is not used. Batches: rows accept different m, so each depth's chunk is laid out per row as
`[holes | permanent (right-aligned) | holes | temporary (right-aligned)]` with a per-row validity mask, and the
cache keeps per-row hole slots (masked in every later chunk), as the main cache does (`commit_accepted`).

**Without a KV cache** (`kv_cache: false`, the protocol App. D times the paper's speedups with): every step runs
the main model over the whole sequence and every head over every position, Algorithm 1 as written
(`uncached.uncached_generate`, rows one at a time as in App. D's batch 1). The same tokens and accepted counts as
the cached decoding (both equal Algorithm 1), at the cost of recomputing the sequence every step.

Params: `heads` (a directory written by `heads.save_heads`, checked against the model's fingerprint; or a loaded
`DeepSeekMTPHeads`), `num_drafts` D (default: the heads' K), `check_trunk` (default True), `kv_cache` (default
True), `backend` (`compiled`: the trunk's forwards on the fast decode path, `decoding.static`, which returns the h^0
the cascade reads; the cascade eager; only with the KV cache).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from transformers import DynamicCache

from ...decoding.base import GenerationResult, StopCriteria, register_decoder
from ...decoding.cache import crop_cache, select_rows
from ...decoding.tree import Draft, TreeDecoder, TreeState, chain_buffers
from ...models.heads import load_heads
from ...models.heads.deepseek import DeepSeekMTPHeads, chunk_mask
from .uncached import uncached_generate


def right_aligned(valid: torch.Tensor) -> torch.Tensor:
    """Per row, the indices that move the valid entries of `valid` [B, S] to the end, in order (holes first)."""
    return torch.sort(valid.to(torch.int8), dim=1, stable=True).indices


def _take(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """x[b, idx[b, j]] for [B, S] or [B, S, H] tensors."""
    if x.dim() == 2:
        return x.gather(1, idx)
    return x.gather(1, idx[..., None].expand(-1, -1, x.shape[-1]))


def _place(counts: torch.Tensor, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """For `width` slots holding `counts[b]` entries right-aligned: each slot's entry number e (0-based, clamped)
    and whether it holds one."""
    j = torch.arange(width, device=counts.device)[None]
    e = j - (width - counts[:, None])
    return e.clamp(min=0), e >= 0


class HeadCascade:
    """The heads' decoding state of a batch: per depth d (1..D) its KV cache with a per-row slot mask, `done[d]`
    (= c_d, the positions it has made permanent) and `carry[d]`: h^d at positions c_{d+1} .. c_d - 1, which depth
    d+1 has yet to make permanent (one row per batch row in steady state)."""

    def __init__(self, heads: DeepSeekMTPHeads, trunk: torch.nn.Module, depths: int, batch: int, device, dtype):
        self.heads, self.trunk, self.depths = heads, trunk, int(depths)
        hid = heads.block_config.hidden_size
        self.caches = [DynamicCache() for _ in range(self.depths)]
        self.kv_valid = [torch.zeros(batch, 0, dtype=torch.bool, device=device) for _ in range(self.depths)]
        self.done = [torch.zeros(batch, dtype=torch.long, device=device) for _ in range(self.depths)]
        self.carry = [
            (
                torch.zeros(batch, 0, hid, dtype=dtype, device=device),
                torch.zeros(batch, 0, dtype=torch.bool, device=device),
            )
            for _ in range(self.depths)
        ]

    def select(self, rows: torch.Tensor) -> None:
        """Keep batch rows `rows` (TreeState.select calls this when finished rows are pruned)."""
        for d in range(self.depths):
            r = rows.to(self.done[d].device)
            select_rows(self.caches[d], r)
            self.kv_valid[d], self.done[d] = self.kv_valid[d][r], self.done[d][r]
            self.carry[d] = (self.carry[d][0][r], self.carry[d][1][r])

    @torch.inference_mode()
    def step(self, h0: torch.Tensor, h0_valid: torch.Tensor, new_tokens: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
        """The D drafts [B, D] after a verification.

        `n` [B]: position of the newest verified token x_n (the TreeContext root); `h0` [B, S, H] with `h0_valid`:
        the trunk's h^0 at positions c_1 .. n-1 in order (holes anywhere); `new_tokens` [B, S]: x_{c_1+1} .. x_n
        in order, with the same holes."""
        order = right_aligned(h0_valid)
        stream, valid = _take(h0, order), _take(h0_valid, order)
        toks = _take(new_tokens, order)  # right-aligned: slot u holds x_{n - R + 1 + u}
        r = toks.shape[1]
        drafts: list[torch.Tensor] = []
        for d in range(1, self.depths + 1):
            if d > 1:  # depth d reads h^{d-1} at c_d .. n-1: the carried rows, then depth d-1's chunk
                carry_h, carry_valid = self.carry[d - 2]
                both = torch.cat([carry_valid, valid], dim=1)
                order = right_aligned(both)
                stream, valid = _take(torch.cat([carry_h, stream], dim=1), order), _take(both, order)
            ext = torch.cat([toks, *[t[:, None] for t in drafts]], dim=1)  # slot u: x_{n - R + 1 + u}
            out, valid, stream_pos = self._depth(d, stream, valid, ext, r, n)
            if d > 1:
                self._update_carry(d - 1, stream, stream_pos, n)
            logits = self.trunk.lm_head(out[:, -1])  # position n-1 (the chunk's last row is always valid)
            drafts.append(logits.argmax(-1))
            stream = out
        return torch.stack(drafts, dim=1)

    def _depth(self, d: int, stream: torch.Tensor, valid: torch.Tensor, ext: torch.Tensor, r: int, n: torch.Tensor):
        """Run depth d's chunk on the right-aligned stream of h^{d-1} (positions c_d .. n-1); returns its output
        [B, Q, H] with row validity, and the stream's positions (to find the rows depth d-1 still carries)."""
        s = stream.shape[1]
        count = valid.sum(1)  # = n - c_d
        c = self.done[d - 1]
        perm = (n - d + 1).clamp(min=0) - c  # positions c_d .. n-d become permanent
        temp = count - perm  # positions max(c_d, n-d+1) .. n-1, at most d-1
        width_p, width_t = int(perm.max()), d - 1
        e_p, in_p = _place(perm, width_p)
        e_t, in_t = _place(temp, width_t)
        src = torch.cat([s - count[:, None] + e_p, s - temp[:, None] + e_t], dim=1).clamp(max=s - 1)
        ok = torch.cat([in_p, in_t], dim=1)
        h_in = _take(stream, src)
        pos = (n[:, None] - s + src).clamp(min=0)  # slot j of the stream is position n - s + j
        tok_idx = (pos + d - (n[:, None] - r + 1)).clamp(0, ext.shape[1] - 1)
        ids = ext.gather(1, tok_idx)
        cache = self.caches[d - 1]
        mask = chunk_mask(self.kv_valid[d - 1], ok, h_in.dtype if self.heads.eager else None)
        out = self.heads.depth_forward(self.trunk, d, h_in, ids, pos, mask, cache)
        crop_cache(cache, width_t)
        self.kv_valid[d - 1] = torch.cat([self.kv_valid[d - 1], ok[:, :width_p]], dim=1)
        self.done[d - 1] = c + perm
        stream_pos = n[:, None] - s + torch.arange(s, device=n.device)[None]
        return out, ok, (stream_pos, valid)

    def _update_carry(self, d: int, stream: torch.Tensor, stream_pos, n: torch.Tensor) -> None:
        """carry[d] = h^d at positions c_{d+1} .. c_d - 1, taken from the stream depth d+1 just read."""
        pos, valid = stream_pos
        lo, hi = self.done[d], self.done[d - 1]
        count = hi - lo
        width = int(count.max()) if count.numel() else 0
        e, ok = _place(count, width)
        want = lo[:, None] + e
        src = (want - pos[:, :1]).clamp(0, stream.shape[1] - 1)  # the stream's positions are consecutive
        self.carry[d - 1] = (_take(stream, src), ok & _take(valid, src))


def _left_to_valid(tokens: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """Validity of the first `count[b]` entries of each row."""
    return torch.arange(tokens.shape[1], device=tokens.device)[None] < count[:, None]


@register_decoder("mtp-spec")
class MTPSpecDecoder(TreeDecoder):
    """Chain drafts from cascaded MTP heads, verified by the main model (module docstring)."""

    PARAMS = ("heads", "num_drafts", "check_trunk", "kv_cache")
    BACKENDS = ("eager", "compiled")  # compiled: the trunk's forwards on a static cache, the cascade eager
    needs_hidden = True  # the accepted path's h^0 feeds head 1's permanent rows
    needs_prompt_hidden = True  # and, after the prefill, the prompt's

    def __init__(self, model: torch.nn.Module, tokenizer: Any, **params: Any):
        super().__init__(model, tokenizer, **params)
        heads = params.get("heads")
        if heads is None:
            raise ValueError("mtp-spec needs `heads` (a heads directory)")
        if not isinstance(heads, DeepSeekMTPHeads):
            heads = load_heads(heads, model, check=bool(params.get("check_trunk", True)))
            if not isinstance(heads, DeepSeekMTPHeads):
                raise ValueError(f"mtp-spec: {params['heads']} holds {heads.arch} heads, not deepseek_mtp")
        heads.set_attn_implementation(getattr(model.config, "_attn_implementation", None) or "sdpa")
        self.heads = heads.eval()
        self.depths = int(params.get("num_drafts") or heads.num_heads)
        if self.depths < 1:
            raise ValueError(f"mtp-spec: num_drafts must be >= 1, got {self.depths}")
        self.kv_cache = bool(params.get("kv_cache", True))

    def max_chunk_rows(self) -> int:
        return self.depths + 1

    def generate(
        self, prompts: Sequence[Sequence[int]], max_new_tokens: int, stop: StopCriteria
    ) -> list[GenerationResult]:
        if self.kv_cache:
            return super().generate(prompts, max_new_tokens, stop)
        return uncached_generate(self.model, self.tokenizer, self.heads, self.depths, prompts, max_new_tokens, stop)

    def propose(self, state: TreeState) -> Draft:
        cascade: HeadCascade | None = state.data.get("heads")
        n = state.ctx.root_pos
        if cascade is None:  # after the prefill: every prompt position feeds head 1
            h0 = state.prompt_hidden
            b, width = h0.shape[:2]
            lens = torch.tensor(state.prompt_lens, device=h0.device)
            valid = torch.arange(width, device=h0.device)[None] >= (width - lens)[:, None]
            toks = torch.zeros(b, width, dtype=torch.long, device=h0.device)
            for i, hist in enumerate(state.history):  # x_1 .. x_L (prompt[1:] + the first token), right-aligned
                toks[i, width - len(hist) + 1 :] = torch.tensor(hist[1:])
            cascade = HeadCascade(self.heads, self.model, self.depths, b, h0.device, h0.dtype)
            state.data["heads"], state.prompt_hidden = cascade, None
        else:  # the verified path: the old root and the accepted drafts; their successors are the emitted tokens
            last = state.last
            count = last.num_accepted + 1
            h0, toks = last.hidden, last.tokens.clamp(min=0)
            valid = _left_to_valid(toks, count)
        drafts = cascade.step(h0, valid, toks, n)
        return Draft(chain_buffers(self.depths), drafts)

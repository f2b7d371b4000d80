"""Paper 1 decoding: Static-k and ConfAdapt with the `<MTP>` mask token (§4.5 KV cache, §4.6 strategies).

One implementation, `MaskMTPDecoder`, with an acceptance-rule hook (`accept`):

* **Static-k** (`static-k`, param `k`): accept all k predictions of every step.
* **ConfAdapt** (`conf-adapt`, params `tau` (0.9), `k_max` (16)): accept the longest leading run of positions
  whose top-1 softmax probability (each position on its own, not a cumulative product) is >= tau; at least one
  token (position 0 is the plain next-token prediction), at most k_max. `accept_count` is that rule as a pure,
  batched function. This is the official `_mtp_next_tokens`: the first position with conf < tau ends the run,
  and a run of 0 falls back to 1.

One step (official `_mtp_generate`): the forward's input is [the tokens not yet in the cache] +
[k-1 mask tokens]. The not-yet-cached tokens are exactly the tokens accepted by the previous step: their
predictions were made while masks stood at their positions, so no KV entry of theirs exists and they are
re-fed (`refeed` = number of tokens accepted last step; 2k-1 tokens per forward in steady Static-k, §4.5).
There is no cheaper exact variant: every accepted token's KV must be computed from the token itself, and the
masks' KV (the only other entries computed at those positions) belongs to a different input. Position ids
continue the sequence, so mask j stands at the position of the j-th next token. The logits of the last k
positions (the last real token + the k-1 masks; `logits_to_keep=k`) give k argmax predictions; the chosen
prefix is emitted; the cache is cropped back to the prefix (masks are never kept). The prefill forward is the
prompt + k-1 masks, so it already emits up to k tokens (`accepted[0]` counts them).

Stop handling (paper 1 appendix "Stopping criteria"): the accepted chunk is fed to `StopTracker`, which ends the
row at its first EOS / stop string / the length limit and drops the rest of the chunk. The official code keeps
tokens after an EOS inside the final chunk and stops *before* a step that could exceed the length
(`cur_len + k <= max`), so it may return fewer tokens; we emit exactly `max_new_tokens` unless a stop hits.
Near the limit the step's k is capped at the largest number of tokens a live row may still emit: by causality
the kept predictions are the same as with the full k, only cheaper. `accepted[i]` is capped at the row's
remaining budget the same way, so batched and unbatched runs record the same counts.

Batching (the official decoder is batch-1 only): rows accept different counts, so they need different numbers
of re-fed tokens. Every row keeps ONE padded cache of the same length plus a per-row validity mask `kv_mask`
(left padding of the prompts, and holes). In a step the chunk is `[holes, re-fed tokens, masks]`, with
`R = max(refeed)` re-fed slots: a row that re-feeds r < R tokens gets R - r holes in front (marked invalid,
so no query ever attends to them; they do not shift positions, which are per row). The masks are then the
last k-1 slots of every row, so `logits_to_keep=k` still reads the right positions. After the step the k-1
mask slots are cropped and the R re-fed slots (holes included) stay, holes as invalid entries. The model gets
the 2D mask `[kv_mask, chunk validity]` and builds its causal mask from it, as greedy does; with no padding
and no holes (batch 1, or Static-k on equal-length prompts) no mask is passed. Finished rows are pruned
(`prune_finished`, as greedy). After pruning, and whenever compaction would drop more than `compact_at` (0.25)
of the cache columns, `compact_cache` right-aligns each row's valid slots with one gather (about the copy
`DynamicCache` already makes every step) and drops the columns no row needs, so the waste stays bounded.

`backend: compiled` (`decoding.static`): the same steps on a static cache, every step's chunk compiled at its
bucket of rows (the padding extra masks after the chunk, as above) with all its logits (one graph per bucket),
the prefill eager. Its shapes stay fixed, so finished rows are not pruned (they step on, their tokens ignored) and
the cache is not compacted: holes stay as masked slots, and a batch whose slots outrun the cache grows it. The
chunk of a step (2k-1 rows) must fit the largest bucket, so k <= 64.

Params common to both: `mask_id` (default `model.config.mtp_mask_token_id`, set by
`mtp_core.papers.p1.mask_token.add_mask_token`), `prune_finished` (True), `pad_small_chunks` (True: a forward of 2-3
new rows in total, batch 1 Static-k k=2 for instance, is padded to 4 with extra masks at the end, a measured
CPU fast path; the padding follows every kept position, so by causality the outputs are unchanged).
`extra["chunk_tokens"][i]` is the number of new tokens forward i fed for that row (prefill: prompt + k-1;
then re-fed + k-1), `extra["refed"][i]` the re-fed part (0 for the prefill) and `extra["chunk_rows"][i]` the
rows forward i ran for every row of the batch (0 for the prefill; the tree decoders' convention, which the
modeled speed prices: `decoding.pricing.generation_steps`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import Cache, DynamicLayer

from ...decoding.base import Decoder, GenerationResult, StopCriteria, register_decoder
from ...decoding.batch import prepare_batch
from ...decoding.cache import crop_cache, select_rows
from ...decoding.static import bucket_rows
from ...decoding.stopping import StopTracker


def top1_confidence(logits: torch.Tensor) -> torch.Tensor:
    """Top-1 softmax probability of every position on its own: `logits [..., V] -> [...]` (float32)."""
    x = logits.float()
    return (x.max(-1).values - torch.logsumexp(x, -1)).exp()


def accept_count(conf: torch.Tensor, tau: float, k_max: int | None = None) -> torch.Tensor:
    """ConfAdapt's acceptance rule (paper 1 §4.6), vectorised: `conf [B, K]` (or `[K]`) -> counts `[B]` (or `[]`).

    The length of the longest leading run of positions with `conf >= tau`, at least 1, at most
    `min(k_max, K)`. tau > 1 accepts one token per step; tau <= 0 accepts all K.
    """
    if conf.shape[-1] == 0:
        raise ValueError("accept_count needs at least one position")
    run = (conf >= tau).long().cumprod(-1).sum(-1)
    cap = conf.shape[-1] if k_max is None else min(int(k_max), conf.shape[-1])
    return run.clamp(min=1, max=cap)


def compact_cache(cache: DynamicCache, kv_mask: torch.Tensor) -> torch.Tensor:
    """Right-align every row's valid cache slots (order kept) and drop the columns no row needs any more.

    Returns the new `kv_mask`. Exact: positions are per row and explicit, and every cached slot precedes every
    later chunk, so only the order of a row's valid slots matters. A no-op for non-`DynamicLayer` caches.
    """
    width = int(kv_mask.sum(1).max())
    if width == kv_mask.shape[1] or any(type(layer) is not DynamicLayer for layer in cache.layers):
        return kv_mask
    idx = torch.sort(kv_mask.int(), dim=1, stable=True).indices[:, -width:]  # invalid slots first, then valid
    for layer in cache.layers:
        if layer.is_initialized and layer.keys.numel():
            for name in ("keys", "values"):
                t = getattr(layer, name)
                src = idx.to(t.device)[:, None, :, None].expand(-1, t.shape[1], -1, t.shape[3])
                setattr(layer, name, t.gather(2, src))
    return kv_mask.gather(1, idx)


def resolve_mask_id(model: torch.nn.Module, params: dict[str, Any], who: str) -> int | None:
    """The `<MTP>` mask id: `params["mask_id"]`, else `model.config.mtp_mask_token_id`, else None."""
    mid = params.get("mask_id")
    if mid is None:
        mid = getattr(model.config, "mtp_mask_token_id", None)
    if mid is None:
        return None
    mid = int(mid)
    rows = model.get_input_embeddings().weight.shape[0]
    if not 0 <= mid < rows:
        raise ValueError(f"{who}: mask_id {mid} is outside the model's embedding matrix ({rows} rows)")
    return mid


class MaskMTPDecoder(Decoder):
    """Paper 1 multi-token decoding with appended mask tokens; subclasses set `k` and implement `accept`.

    Lossy: Static-k with k > 1 and ConfAdapt with tau <= 1 emit what the MTP student predicts, not what greedy
    decoding would.
    """

    lossless = False
    PARAMS = ("mask_id", "prune_finished", "pad_small_chunks", "compact_at")
    BACKENDS = ("eager", "compiled")

    def __init__(self, model: torch.nn.Module, tokenizer: Any, **params: Any):
        super().__init__(model, tokenizer, **params)
        k = self.predictions_per_step()
        if isinstance(k, bool) or int(k) != k or k < 1:
            raise ValueError(f"{self.name}: the number of predictions per step must be an integer >= 1, got {k!r}")
        self.k = int(k)
        self.mask_id = resolve_mask_id(model, params, self.name)
        if self.mask_id is None and self.k > 1:
            raise ValueError(
                f"{self.name}: no mask token id: pass mask_id=... or use a model prepared with "
                "mtp_core.papers.p1.mask_token.add_mask_token (it sets model.config.mtp_mask_token_id)"
            )
        if self.backend == "compiled":
            bucket_rows(2 * self.k - 1)  # a step's chunk (k re-fed + k-1 masks) fits the largest compiled forward
        self.prune = bool(params.get("prune_finished", True))
        self.pad_small = bool(params.get("pad_small_chunks", True))
        self.compact_at = float(params.get("compact_at", 0.25))
        self.params.update(
            mask_id=self.mask_id, prune_finished=self.prune, pad_small_chunks=self.pad_small, compact_at=self.compact_at
        )

    def predictions_per_step(self) -> int:
        """k: predictions per forward (the last real token + k-1 masks), from `self.params`."""
        raise NotImplementedError

    def accept(self, logits: torch.Tensor) -> torch.Tensor:
        """How many leading predictions each row accepts, from the step's logits `[B, K, V]` -> `[B]` in 1..K."""
        raise NotImplementedError

    def _forward(
        self,
        ids: torch.Tensor,
        pos: torch.Tensor,
        mask: torch.Tensor | None,
        cache: Cache | None,
        keep: int,
        compiled: bool = False,
    ) -> tuple[torch.Tensor, int]:
        """One forward of a chunk ending in `keep - 1` masks: the logits of its last `keep` positions and the rows it
        ran (the chunk's width); the masks' slots are cropped afterwards (masks are never kept).

        Eager, 2-3 new rows in all are padded to 4 (a CPU fast path). `compiled`: the chunk runs on the static session
        at its bucket of rows (`static.bucket_rows`), with every row's logits (one graph per bucket, whatever
        `keep`), its mask (when one is needed) widened to the whole cache. Either way the padding is extra masks
        after the chunk, so by causality they change no kept prediction, and their slots are cropped."""
        b, n = ids.shape
        small = self.pad_small and b * n in (2, 3)
        n_pad = bucket_rows(n) - n if compiled else 4 - b * n if small else 0
        if n_pad:
            fill = self.mask_id if self.mask_id is not None else int(ids[0, -1])
            ids = torch.cat([ids, ids.new_full((b, n_pad), fill)], dim=1)
            pos = torch.cat([pos, pos[:, -1:] + torch.arange(1, n_pad + 1, device=pos.device)[None]], dim=1)
            if mask is not None:
                mask = torch.cat([mask, mask.new_ones(b, n_pad)], dim=1)
        session = self.static
        if session is not None:  # backend compiled: the static cache (eager for the prefill)
            slots = int(session.cache.get_seq_length()) + ids.shape[1]
            if slots > session.length:
                session.grow(slots)
            cache = session.cache
            if mask is not None:  # slots past the chunk are hidden by causality
                mask = torch.nn.functional.pad(mask, (0, session.length - mask.shape[1]), value=1)
        if compiled:
            logits = session.step(ids, mask, pos, keep=0)[:, n - keep : n]
        else:
            logits = self.model(
                input_ids=ids, attention_mask=mask, position_ids=pos, cache=cache, logits_to_keep=keep + n_pad
            ).logits[:, :keep]
        crop_cache(cache, keep - 1 + n_pad)
        return logits, n + n_pad

    @torch.inference_mode()
    def generate(
        self, prompts: Sequence[Sequence[int]], max_new_tokens: int, stop: StopCriteria
    ) -> list[GenerationResult]:
        device = next(self.model.parameters()).device
        ids, mask, pos = prepare_batch(prompts, self.tokenizer, device)
        n = len(prompts)
        tracker = StopTracker(n, stop, self.tokenizer, max_new_tokens)
        accepted: list[list[int]] = [[] for _ in range(n)]
        chunk_tokens: list[list[int]] = [[] for _ in range(n)]
        refed: list[list[int]] = [[] for _ in range(n)]
        chunk_rows: list[list[int]] = [[] for _ in range(n)]
        compiled = self.backend == "compiled"  # a static batch: finished rows stay, chunks at bucket sizes
        cache = None if compiled else DynamicCache(config=self.model.config)
        if compiled:
            self.static_session(n, ids.shape[1] + max_new_tokens, bucket_rows(2 * self.k - 1))
        mask_id = self.mask_id if self.mask_id is not None else 0

        # prefill: prompt + (k-1) masks at the next positions; emits up to k tokens
        t0 = time.perf_counter()
        k_step = max(1, min(self.k, max_new_tokens))
        steps = torch.arange(1, k_step, device=device)
        chunk = torch.cat([ids, ids.new_full((n, k_step - 1), mask_id)], dim=1)
        chunk_pos = torch.cat([pos, pos[:, -1:] + steps[None]], dim=1)
        padded = bool((mask == 0).any())
        attn = torch.cat([mask, mask.new_ones(n, k_step - 1)], dim=1) if padded else None
        logits, _ = self._forward(chunk, chunk_pos, attn, cache, k_step)
        kv_mask = mask.bool()
        next_pos = pos[:, -1] + 1  # position of the first token not yet in the cache
        counts, preds = self.accept(logits), logits.argmax(-1)
        fed = (mask.sum(1) + k_step - 1).tolist()  # new tokens of each row's forward
        refeed, rows = [0] * n, 0  # rows of the forward (0: the prefill)
        t1 = time.perf_counter()

        live = list(range(n))  # original row of each batch row
        while True:
            counts_l, preds_l = counts.tolist(), preds.tolist()
            pending: list[list[int]] = []
            for b, row in enumerate(live):
                c = min(counts_l[b], max_new_tokens - len(tracker.tokens[row]))
                toks = preds_l[b][:c]
                pending.append(toks)
                if not tracker.done(row):  # rows kept after stopping (prune_finished=False) record nothing
                    tracker.feed(row, toks)
                    accepted[row].append(c)
                    chunk_tokens[row].append(fed[b])
                    refed[row].append(refeed[b])
                    chunk_rows[row].append(rows)
            keep = [b for b, row in enumerate(live) if not tracker.done(row)]
            if not keep:
                break
            if self.prune and not compiled and len(keep) < len(live):
                kt = torch.tensor(keep, device=device)
                select_rows(cache, kt)
                kv_mask, next_pos = compact_cache(cache, kv_mask[kt]), next_pos[kt]
                live, pending = [live[b] for b in keep], [pending[b] for b in keep]
            b_live = len(live)
            remaining = max(max_new_tokens - len(tracker.tokens[row]) for row in live if not tracker.done(row))
            k_step = max(1, min(self.k, remaining))
            # rows whose budget is spent (kept only with prune_finished=False) re-feed their last chunk, if any
            r = [max(1, len(p)) for p in pending]
            big_r = max(r)
            width = big_r + k_step - 1
            chunk = torch.full((b_live, width), mask_id, dtype=torch.long)
            valid = torch.zeros((b_live, big_r), dtype=torch.bool)
            for b, p in enumerate(pending):
                p = p or [mask_id]
                chunk[b, big_r - len(p) : big_r] = torch.tensor(p)
                valid[b, big_r - len(p) :] = True
            chunk, valid = chunk.to(device), valid.to(device)
            holes = big_r - torch.tensor(r, device=device)
            col = torch.arange(width, device=device)
            chunk_pos = next_pos[:, None] + (col[None] - holes[:, None]).clamp(min=0)
            if bool(kv_mask.all()) and bool(valid.all()):
                attn = None
            else:
                attn = torch.cat([kv_mask, valid, valid.new_ones(b_live, k_step - 1)], dim=1).long()
            logits, rows = self._forward(chunk, chunk_pos, attn, cache, k_step, compiled)
            kv_mask = torch.cat([kv_mask, valid], dim=1)
            if (
                not compiled
                and b_live > 1
                and kv_mask.shape[1] - int(kv_mask.sum(1).max()) > self.compact_at * kv_mask.shape[1]
            ):
                kv_mask = compact_cache(cache, kv_mask)
            next_pos = next_pos + torch.tensor(r, device=device)
            counts, preds = self.accept(logits), logits.argmax(-1)
            fed, refeed = [x + k_step - 1 for x in r], r
        t2 = time.perf_counter()
        extra = {"chunk_tokens": chunk_tokens, "refed": refed, "chunk_rows": chunk_rows}
        return tracker.results(prompts, accepted, (t0, t1, t2), extra)


@register_decoder("static-k")
class StaticKDecoder(MaskMTPDecoder):
    """Static-k (paper 1 §4.6): every step accepts all k predictions. Params: `k` (required), see module doc."""

    PARAMS = ("k",)

    def predictions_per_step(self) -> int:
        if "k" not in self.params:
            raise ValueError("static-k: parameter 'k' (tokens per step) is required")
        return self.params["k"]

    def accept(self, logits: torch.Tensor) -> torch.Tensor:
        return torch.full((logits.shape[0],), logits.shape[1], dtype=torch.long, device=logits.device)


@register_decoder("conf-adapt")
class ConfAdaptDecoder(MaskMTPDecoder):
    """ConfAdapt (paper 1 §4.6): per step the longest leading run with top-1 confidence >= `tau` (default 0.9),
    at least 1, at most `k_max` (default 16, the paper's). The paper's tau grid: 0.995 .. 0.6."""

    PARAMS = ("tau", "k_max")

    def predictions_per_step(self) -> int:
        self.tau = float(self.params.get("tau", 0.9))
        self.params.update(tau=self.tau, k_max=self.params.get("k_max", 16))
        return self.params["k_max"]

    def accept(self, logits: torch.Tensor) -> torch.Tensor:
        return accept_count(top1_confidence(logits), self.tau, self.k)

"""Lossless tree verification (the shared core of P2, P3 and P5) and a generic draft-verify-accept decoder.

The acceptance rules live in `decoding.tree.accept`, the state objects (`TreeContext`, `TreeVerifyResult`,
`Draft`, `TreeState`) in `decoding.tree.state`, the buffers of a tree in `decoding.tree.buffers`.

One verification step (Medusa `tree_decoding` + `evaluate_posterior` + `update_inference_inputs`, generalised
to batches):

1. `tree_forward`: ONE forward of the chunk `[root, node_1 .. node_{N-1}, extra_1 .. extra_E, pad ..]` on top of
   the KV cache of the accepted prefix, with a 4D mask `[B, 1, n, L + n]` (bool for sdpa, additive float for
   eager attention; no mask at all for a causal chunk, i.e. a chain, on a cache without holes) and position ids
   `root_pos + depth`. Chunks of 2-3 rows are padded to 4 (`pad_small_chunks`, a measured CPU fast path). Each
   tree node sees the prefix, its ancestors and itself, so its logits equal those of a plain forward over prefix
   + ancestors + node.
2. `greedy_accept`: a node is accepted when its token equals the model's argmax at its parent and its parent is
   accepted; the deepest accepted node wins (first in node order on ties) and the bonus token is the argmax
   there. A row emits `num_accepted + 1` tokens. `typical_accept` is Medusa's typical acceptance (lossy, see its
   docstring). Both take `allowed` [N] (nodes that may be accepted, the others are verified but never accepted:
   Hydra's `max_accepts`, which the union-tree rollout of EntMTP's search needs).
3. `commit_accepted`: the KV entries of root + accepted nodes are gathered from the tree part of the cache into
   consecutive slots right after the prefix (no recompute), and the rest of the chunk is cropped.

Batches (same tree for all rows): rows accept different lengths, so every row keeps `m = max(num_accepted) + 1`
new slots and the slots past its own accepted length become holes, marked False in a per-row `kv_mask`
(`TreeContext.kv_mask`, which also marks left padding). Position ids are tracked per row (`root_pos`), so holes
do not shift RoPE positions; every later chunk's mask hides them.

On the fast path (`backend: compiled`, a decoder that lists it and gives `max_chunk_rows`): the prefill is eager on
a `decoding.static.StaticSession`, every chunk runs compiled at its bucket of rows (`static.bucket_rows`; padding
rows continue the last row as a chain) with a 4D mask over the whole static cache, the gather and crop act on the
static layers, finished rows stay in the batch (a static shape; marked in `TreeState.finished`, they draft nothing and
no batch decision counts them), and a batch whose slots outrun the cache grows it.
Extra rows and hidden states ride as they do eager (the compiled forward takes input embeddings and returns the final
hidden states); the drafters' own modules run eager or, paper 5's heads, compiled on the session
(`StaticSession.call`).

Hidden states (`TreeDecoder.needs_hidden`): the final hidden states (post-norm, the `lm_head` input) at the
accepted path reach the drafter as `state.last.hidden` and, at the last accepted node, `state.last_hidden`; with
`needs_prompt_hidden` the prompt's are in `state.prompt_hidden` after the prefill (Hydra's prefix layer runs over
every committed position).

Extra positions riding in the verification forward (P3 mask-token probing, P5 heads that need a hidden state):
`extra_parents` [E] lists, for each extra row, its parent row in the chunk (a tree node 0..N-1, or an earlier
extra row N..N+E-1) and `extra_embeds` [B, E, H] its input embedding (e.g. a mask embedding). An extra row sees
the prefix, all its ancestors in the chunk (tree nodes and extra rows) and itself, and sits at position
`root_pos + depth`. A chain of k mask tokens hung on node i is `extra_parents = [i, N, N+1, ..]`; hanging one
chain on every node gives, after acceptance, the probes of the accepted path (select the chain whose anchor is
`TreeVerifyResult.last_node`). Extra rows are never accepted and their KV entries are cropped with the rest.
"""

from __future__ import annotations

import time
from abc import abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer, StaticLayer

from ..base import Decoder, GenerationResult, StopCriteria
from ..batch import prepare_batch
from ..cache import crop_cache
from ..layers import logits_and_hidden
from ..static import bucket_rows
from ..stopping import StopTracker
from .accept import _greedy_from_ok, node_ok, typical_accept
from .buffers import TreeBuffers, ancestor_mask, chunk_attention_mask
from .state import Draft, TreeContext, TreeState, TreeVerifyResult


def attn_is_eager(model: torch.nn.Module) -> bool:
    """True for eager attention, which needs an additive float mask (a bool one is silently wrong)."""
    return getattr(model.config, "_attn_implementation", "sdpa") == "eager"


def _chunk_layout(
    buffers: TreeBuffers, extra_parents: torch.Tensor | None, pad: bool | str
) -> tuple[torch.Tensor, torch.Tensor, int, bool]:
    """The visibility mask of every chunk row (tree, extra, padding), their depths, the pad count and whether the
    chunk is causal (a chain). `pad`: True pads chunks of 2-3 rows to 4 (`pad_small_chunks`), "bucket" pads every
    chunk to its compiled row count (`static.bucket_rows`). Without extra rows the layout is cached on the tree
    (`TreeBuffers.chunk_layouts`), so a drafter switching between the trees of a bank recomputes nothing."""
    has_extra = extra_parents is not None and extra_parents.numel() > 0
    if not has_extra and pad in buffers.chunk_layouts:
        return buffers.chunk_layouts[pad]
    parents = buffers.parents
    if has_extra:
        parents = torch.cat([parents, extra_parents.to(torch.long).cpu()])
    n = parents.numel()
    small = 4 - n if pad and n in (2, 3) else 0  # 2-3 rows take a slow CPU matmul path; 4 do not
    n_pad = bucket_rows(n) - n if pad == "bucket" else small
    if n_pad:  # padding rows continue the last row as a chain, so a chain chunk stays causal
        parents = torch.cat([parents, torch.arange(n - 1, n - 1 + n_pad)])
    anc = ancestor_mask(parents)
    layout = (anc, anc.sum(1) - 1, n_pad, torch.equal(anc, torch.ones_like(anc).tril()))
    if not has_extra:
        buffers.chunk_layouts[pad] = layout
    return layout


def tree_forward(
    model: torch.nn.Module,
    ctx: TreeContext,
    buffers: TreeBuffers,
    candidates: torch.Tensor,
    *,
    extra_parents: torch.Tensor | None = None,
    extra_embeds: torch.Tensor | None = None,
    pad_small_chunks: bool = True,
    output_hidden: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Run the chunk `[root, tree nodes, extra rows, padding]` in one forward; returns (logits, last hidden) of
    every chunk row, [B, n, V] and [B, n, H] (None unless `output_hidden`). The cache grows by n slots.

    `candidates` [B, N-1] are the non-root nodes' tokens in node order (-1 = no candidate: fed as token 0 and
    never accepted). See the module docstring for `extra_parents` / `extra_embeds`.
    """
    b, n_tree = ctx.batch_size, buffers.num_nodes
    if candidates.shape != (b, n_tree - 1):
        raise ValueError(f"candidates of shape {tuple(candidates.shape)}, expected {(b, n_tree - 1)}")
    n_extra = 0 if extra_parents is None else int(extra_parents.numel())
    if n_extra and (extra_embeds is None or extra_embeds.shape[:2] != (b, n_extra)):
        raise ValueError(f"extra_embeds must have shape [{b}, {n_extra}, hidden]")
    device, session = ctx.root.device, ctx.session
    anc, depth, n_pad, causal = _chunk_layout(buffers, extra_parents, "bucket" if session else pad_small_chunks)
    ids = torch.cat([ctx.root[:, None], candidates.clamp(min=0).to(device)], dim=1)
    if n_pad:
        ids = torch.cat([ids, ctx.root[:, None].expand(b, n_pad)], dim=1)
    pos = ctx.root_pos[:, None] + depth.to(device)[None]
    embeds = None
    if n_extra:  # the extra rows' embeddings between the tree's tokens and the padding
        tok_emb = model.get_input_embeddings()(ids)
        ex = extra_embeds.to(device=device, dtype=tok_emb.dtype)
        embeds = torch.cat([tok_emb[:, :n_tree], ex, tok_emb[:, n_tree:]], dim=1)
    if session is not None:  # compiled, at the bucket's row count, with a mask over the whole static cache
        if ctx.kv_mask.shape[1] + anc.shape[0] > session.length:
            session.grow(ctx.kv_mask.shape[1] + anc.shape[0])
            ctx.cache = session.cache
        mask = chunk_attention_mask(ctx.kv_mask, anc.to(device), slots=session.length)
        out = session.step(None if n_extra else ids, mask, pos, keep=0, embeds=embeds, hidden=output_hidden)
        return out if output_hidden else (out, None)
    if causal and bool(ctx.kv_mask.all()):
        mask = None  # a causal chunk (a chain, a bare root) without holes: the model's own causal path
    else:
        dtype = next(model.parameters()).dtype
        mask = chunk_attention_mask(ctx.kv_mask, anc.to(device), dtype if attn_is_eager(model) else None)
    return logits_and_hidden(
        model,
        0,
        output_hidden,
        input_ids=None if n_extra else ids,
        inputs_embeds=embeds,
        attention_mask=mask,
        position_ids=pos,
        cache=ctx.cache,
    )


def gather_cache_slots(cache: DynamicCache, start: int, src: torch.Tensor) -> None:
    """In every layer, write slots `start + src[b, j]` into slot `start + j` of row b (j < src.shape[1]).

    The per-row KV gather of tree verification (Medusa `update_inference_inputs`, per row); `src[b, j] >= j`.
    """
    b, m = src.shape
    for layer in cache.layers:
        if type(layer) not in (DynamicLayer, StaticLayer):
            raise NotImplementedError(f"tree KV gather needs dynamic or static layers, got {type(layer).__name__}")
        if not layer.is_initialized:
            continue
        for name in ("keys", "values"):
            t = getattr(layer, name)
            idx = (start + src).to(t.device)[:, None, :, None].expand(b, t.shape[1], m, t.shape[3])
            t[:, :, start : start + m] = t.gather(2, idx)


def commit_accepted(
    ctx: TreeContext, path: torch.Tensor, num_accepted: torch.Tensor, bonus: torch.Tensor, chunk_len: int
) -> None:
    """Keep the KV of root + accepted nodes (gathered, no recompute), crop the rest, move `ctx` to the bonus.

    Every row keeps `max(num_accepted) + 1` new slots; shorter rows' surplus slots become holes (kv_mask False).
    """
    start = ctx.kv_mask.shape[1]
    if ctx.cache.get_seq_length() != start + chunk_len:
        raise RuntimeError(f"cache holds {ctx.cache.get_seq_length()} slots, expected {start + chunk_len}")
    m = int(num_accepted.max()) + 1
    j = torch.arange(m, device=path.device)
    valid = j[None] <= num_accepted[:, None]
    src = torch.where(valid, path[:, :m], j[None])  # holes copy their own slot: a no-op for them
    if not bool((src == j[None]).all()):  # chains and first-branch paths need no gather
        gather_cache_slots(ctx.cache, start, src)
    crop_cache(ctx.cache, chunk_len - m)
    ctx.kv_mask = torch.cat([ctx.kv_mask, valid.to(ctx.kv_mask.device)], dim=1)
    ctx.root = bonus.to(ctx.root.device)
    ctx.root_pos = ctx.root_pos + num_accepted.to(ctx.root_pos.device) + 1


ACCEPTANCE = ("greedy", "typical")


@torch.inference_mode()
def verify_tree(
    model: torch.nn.Module,
    ctx: TreeContext,
    buffers: TreeBuffers,
    candidates: torch.Tensor,
    *,
    extra_parents: torch.Tensor | None = None,
    extra_embeds: torch.Tensor | None = None,
    pad_small_chunks: bool = True,
    return_logits: bool = False,
    return_hidden: bool = False,
    commit: bool = True,
    acceptance: str = "greedy",
    temperature: float = 0.0,
    posterior_threshold: float = 0.09,
    posterior_alpha: float = 0.3,
    allowed: torch.Tensor | None = None,
) -> TreeVerifyResult:
    """One verification step: forward, acceptance, KV gather + crop (unless `commit=False`).

    `acceptance` greedy (lossless, the default) or typical (`typical_accept` with `temperature`,
    `posterior_threshold`, `posterior_alpha`; lossy); `allowed` [N]: nodes that may be accepted (None: all).
    On return `ctx` holds the accepted prefix and `ctx.root` the bonus token. With `commit=False` the cache keeps
    the whole chunk (for inspection) and `ctx` is unchanged otherwise.
    """
    if acceptance not in ACCEPTANCE:
        raise ValueError(f"acceptance {acceptance!r} is not one of {', '.join(ACCEPTANCE)}")
    n_tree = buffers.num_nodes
    n_extra = 0 if extra_parents is None else int(extra_parents.numel())
    logits, hidden = tree_forward(
        model,
        ctx,
        buffers,
        candidates,
        extra_parents=extra_parents,
        extra_embeds=extra_embeds,
        pad_small_chunks=pad_small_chunks,
        output_hidden=return_hidden,
    )
    chunk_len = logits.shape[1]
    node_argmax = logits[:, :n_tree].argmax(-1)
    if acceptance == "greedy":
        ok = node_ok(node_argmax, candidates, buffers)
        allowed_ok = ok if allowed is None else ok & allowed.to(ok.device)[None]
        num_acc, last_node, path, tokens = _greedy_from_ok(node_argmax, candidates, buffers, allowed_ok)
    else:
        num_acc, last_node, path, tokens, ok = typical_accept(
            logits[:, :n_tree], candidates, buffers, temperature, posterior_threshold, posterior_alpha, allowed
        )
    rows = torch.arange(logits.shape[0], device=logits.device)
    res = TreeVerifyResult(
        tokens=tokens,
        num_accepted=num_acc,
        path=path,
        last_node=last_node,
        node_argmax=node_argmax,
        last_logits=logits[rows, last_node],
        node_ok=ok,
        chunk_rows=chunk_len,
    )
    take = path.clamp(min=0)
    if return_logits:
        res.logits = logits[rows[:, None], take]
    if return_hidden:
        res.hidden = hidden[rows[:, None], take]
    if n_extra:
        res.extra_logits = logits[:, n_tree : n_tree + n_extra]
        if return_hidden:
            res.extra_hidden = hidden[:, n_tree : n_tree + n_extra]
    if commit:
        bonus = tokens.gather(1, num_acc[:, None]).squeeze(1)
        commit_accepted(ctx, path, num_acc, bonus, chunk_len)
    return res


class TreeDecoder(Decoder):
    """Draft -> verify -> accept until every row stops; lossless (equals reference greedy token for token).

    Subclasses implement `propose(state) -> Draft | None` (None: a plain one-token step) and may override
    `prefill_extra_embeds` to append probe rows (e.g. mask tokens) to the prompt forward; their logits reach the
    drafter as `state.prefill_extra_logits`. `needs_hidden` fills `state.last_hidden` and the accepted path's
    hidden states (`state.last.hidden`), `needs_prompt_hidden` those of every prompt position
    (`state.prompt_hidden`); values in `state.data` with a `select(rows)` method keep their rows when finished
    rows are pruned. Common params: `prune_finished` (default True),
    `pad_small_chunks` (default True: chunks of 2-3 rows are padded to 4, a measured CPU fast path),
    `acceptance` (greedy, the default and lossless; or typical: `typical_accept` with `temperature`,
    `posterior_threshold` 0.09, `posterior_alpha` 0.3, which makes the instance lossy).
    Results: `accepted[i]` = tokens emitted by forward i (prefill 1); `extra["drafted"][i]` = draft rows
    (tree nodes besides the root, extra rows excluded) verified by forward i; `extra["chunk_rows"][i]` = rows
    forward i ran (root, nodes, extra rows, padding; 0 for the prefill), what its cost on a CPU depends on; and
    whatever `row_extra` adds.
    """

    lossless = True
    PARAMS = (
        "prune_finished",
        "pad_small_chunks",
        "acceptance",
        "temperature",
        "posterior_threshold",
        "posterior_alpha",
    )
    needs_hidden: ClassVar[bool] = False  # fill state.last_hidden (`layers.logits_and_hidden`)
    needs_prompt_hidden: ClassVar[bool] = False  # fill state.prompt_hidden (every prompt position, e.g. MTP heads)
    needs_logits: ClassVar[bool] = False  # fill state.last.logits at the accepted path

    def __init__(self, model: torch.nn.Module, tokenizer: Any, **params: Any):
        super().__init__(model, tokenizer, **params)
        self.acceptance = str(params.get("acceptance", "greedy"))
        if self.acceptance not in ACCEPTANCE:
            raise ValueError(f"{self.name}: acceptance {self.acceptance!r} is not one of {', '.join(ACCEPTANCE)}")
        self.verify_kw: dict[str, Any] = {"acceptance": self.acceptance}
        if self.acceptance == "typical":
            self.lossless = False  # an instance attribute: typical acceptance changes the output
            self.verify_kw.update(
                temperature=float(params.get("temperature", 0.7)),
                posterior_threshold=float(params.get("posterior_threshold", 0.09)),
                posterior_alpha=float(params.get("posterior_alpha", 0.3)),
            )

    @abstractmethod
    def propose(self, state: TreeState) -> Draft | None:
        """The draft tree for the next step of every live row."""

    def prefill_extra_embeds(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor | None:
        """Optional [B, E, H] embeddings appended (as a causal chain) after the prompt in the prefill forward."""
        return None

    def start(self, state: TreeState) -> None:
        """Hook called once per batch after the prefill (initialise `state.data`)."""

    def verified(self, state: TreeState) -> None:
        """Hook called after every verification forward, `state.last` holding its result, before finished rows
        are pruned (e.g. to record what every row saw, its last step included)."""

    def row_extra(self, n: int) -> dict[str, list[Any]]:
        """Hook called once per batch at the end: per-row values (lists of `n`, in prompt order) added to each
        result's `extra` (e.g. a scheduler's tree choice per step)."""
        return {}

    def _prefill(
        self,
        ids: torch.Tensor,
        mask: torch.Tensor,
        pos: torch.Tensor,
        cache: DynamicCache,
        to_slots: Callable[[torch.Tensor], torch.Tensor | None] | None = None,
    ):
        """(logits, hidden state) at the prompt's last position, the extra rows' logits, all prompt hidden
        states (`needs_prompt_hidden`). `to_slots`: the attention mask over `cache` of a prefill writing the slots a
        [B, W] mask marks (a static cache's `StaticSession.prompt_mask`; None: that mask itself)."""
        extras = self.prefill_extra_embeds(ids, mask)
        padded = bool((mask == 0).any())
        hid = self.needs_hidden or self.needs_prompt_hidden
        prompt = slice(0, ids.shape[1])
        to_slots = to_slots or (lambda m: m)
        if extras is None:
            logits, full = logits_and_hidden(
                self.model,
                1,
                hid,
                input_ids=ids,
                attention_mask=to_slots(mask) if padded else None,
                position_ids=pos,
                cache=cache,
            )
            return logits[:, -1], None if full is None else full[:, -1], None, self._prompt_part(full, prompt)
        e = extras.shape[1]
        tok = self.model.get_input_embeddings()(ids)
        steps = torch.arange(1, e + 1, device=pos.device)
        logits, full = logits_and_hidden(
            self.model,
            e + 1,
            hid,
            inputs_embeds=torch.cat([tok, extras.to(tok.dtype)], dim=1),
            attention_mask=to_slots(torch.cat([mask, mask.new_ones(mask.shape[0], e)], dim=1)),
            position_ids=torch.cat([pos, pos[:, -1:] + steps[None]], dim=1),
            cache=cache,
        )
        crop_cache(cache, e)
        last = None if full is None else full[:, -e - 1]
        return logits[:, 0], last, logits[:, 1:], self._prompt_part(full, prompt)

    def _prompt_part(self, full: torch.Tensor | None, prompt: slice) -> torch.Tensor | None:
        return full[:, prompt] if full is not None and self.needs_prompt_hidden else None

    def max_chunk_rows(self) -> int:
        """The most rows a verification forward of this decoder runs (what a static cache must hold beyond the
        tokens): a decoder that lists `compiled` among its `BACKENDS` says."""
        raise NotImplementedError(f"{self.name}: no static path")

    @torch.inference_mode()
    def generate(
        self, prompts: Sequence[Sequence[int]], max_new_tokens: int, stop: StopCriteria
    ) -> list[GenerationResult]:
        compiled = self.backend == "compiled"  # a static batch: finished rows stay, every chunk at a bucket size
        prune = bool(self.params.get("prune_finished", True)) and not compiled
        pad_small = bool(self.params.get("pad_small_chunks", True))
        device = next(self.model.parameters()).device
        ids, mask, pos = prepare_batch(prompts, self.tokenizer, device)
        n = len(prompts)
        tracker = StopTracker(n, stop, self.tokenizer, max_new_tokens)
        accepted: list[list[int]] = [[] for _ in range(n)]
        drafted: list[list[int]] = [[] for _ in range(n)]
        chunk_rows: list[list[int]] = [[] for _ in range(n)]

        t0 = time.perf_counter()
        session = None
        if compiled:  # the cache holds the tokens and one bucketed chunk (the prefill's extra rows fit in its room)
            session = self.static_session(n, ids.shape[1] + max_new_tokens, bucket_rows(self.max_chunk_rows()))
        cache = session.cache if session is not None else DynamicCache(config=self.model.config)
        to_slots = session.prompt_mask if session is not None else None
        last_logits, last_hidden, extra_logits, prompt_hidden = self._prefill(ids, mask, pos, cache, to_slots)
        root = last_logits.argmax(-1)
        t1 = time.perf_counter()
        ctx = TreeContext(cache=cache, kv_mask=mask.bool(), root=root, root_pos=pos[:, -1] + 1, session=session)
        state = TreeState(
            ctx=ctx,
            rows=torch.arange(n),
            history=[list(p) + [t] for p, t in zip(prompts, root.tolist())],
            prompt_lens=[len(p) for p in prompts],
            max_new_tokens=max_new_tokens,
            last_logits=last_logits,
            last_hidden=last_hidden,
            prefill_extra_logits=extra_logits,
            prompt_hidden=prompt_hidden,
            step=1,
        )
        self.start(state)
        emitted, n_draft, n_rows = [[t] for t in root.tolist()], 0, 0
        while True:
            for b, row in enumerate(state.rows.tolist()):
                if not tracker.done(row):  # rows kept after stopping (prune_finished=False) record nothing
                    tracker.feed(row, emitted[b])
                    accepted[row].append(len(emitted[b]))
                    drafted[row].append(n_draft)
                    chunk_rows[row].append(n_rows)
            keep = [b for b, row in enumerate(state.rows.tolist()) if not tracker.done(row)]
            if not keep:
                break
            if prune and len(keep) < len(state.rows):
                state.select(torch.tensor(keep))
            state.finished = [tracker.done(row) for row in state.rows.tolist()]
            draft = self.propose(state)
            if draft is None:
                draft = Draft.empty(ctx.batch_size, device)
            res = verify_tree(
                self.model,
                ctx,
                draft.buffers,
                draft.candidates,
                extra_parents=draft.extra_parents,
                extra_embeds=draft.extra_embeds,
                pad_small_chunks=pad_small,
                return_logits=self.needs_logits,
                return_hidden=self.needs_hidden,
                allowed=draft.allowed,
                **self.verify_kw,
            )
            emitted, n_draft, n_rows = res.emitted(), draft.buffers.num_nodes - 1, res.chunk_rows
            for h, e in zip(state.history, emitted):
                h.extend(e)
            state.last, state.last_logits, state.step = res, res.last_logits, state.step + 1
            if self.needs_hidden:
                rows = torch.arange(ctx.batch_size, device=device)
                state.last_hidden = res.hidden[rows, res.num_accepted]
            self.verified(state)
        t2 = time.perf_counter()
        extra = {"drafted": drafted, "chunk_rows": chunk_rows, **self.row_extra(n)}
        return tracker.results(prompts, accepted, (t0, t1, t2), extra)

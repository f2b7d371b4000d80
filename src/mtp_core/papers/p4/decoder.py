"""The `dmtd` decoder: direct multi-token decoding with cyclical KV refilling (§2.2, Fig. 3).

Schedule (phase B, `cyclic`): the prompt runs through every layer, its last column being the first cycle start (the
prefill emits the first new token). Generation step g >= 1 feeds the token emitted by step g-1 at column c:

* **late-only step** (g mod τ != 0): h_base = Enc(Embed(x_c)) (the encoding layers append their K/V; E = 0: the
  embedding), kept as *pending*; the decoding layers run on h_base alone; head -> x_{c+1}.
* **cycle start** (g mod τ == 0): h_base as above, then the **refill**: the thinking layers run on every pending
  column [t0, c] (t0 = their cached length: the τ-1 late-only columns and c itself) in one chunk, filling their
  caches in order; only the last row h_think_c continues: combine(h_base_c, h_think_c) (Eq. 4 with M = 1) -> decoding
  layers -> head. The pending buffer empties.

What makes the steps equal the parallel forward (tested on every split and τ): explicit absolute
positions for every subset call (never the cache-length default, which reads layer 0); each subset's mask built
against its own first layer (the refill's against layer E, a materialised lower-right causal mask; a late step's
against layer L-D) before it appends; the encoding layers run once per token, their pending outputs stored, never
re-run at the refill (that would append duplicate K/V); the left-padding mask cut to each layer's key length.

Batching: layer skipping is a whole-batch decision and the phase counts from the generation step, so left-padded
rows of different prompt lengths stay aligned. Finished rows are pruned from the cache *and* the pending buffer
(`prune_finished`).

`backend: compiled` (`decoding.static`): the same schedule on one static cache (a slot per column in every layer,
each layer writing at its own position), every decoding step's segments compiled (`StaticSession.call`: the
encoding layers, the refill of the thinking layers over τ columns, the decoding layers with the head), the
prefill eager; the padding mask spans the cache's slots. Finished rows stay in the batch (a static shape).

Params: `tau` (inference τ; default the training τ `config.dmtd.cycle`: Table 5 decodes a τ = 3 model at other τ),
`encoding_layers` / `decoding_layers` / `combine` (default `config.dmtd`; required for a model trained without
DMTD, e.g. the untrained baseline), `prune_finished` (True). Lossy (`lossless` True only at τ = 1 with `select`,
which is the vanilla model step for step). `extra` per row: `tau`, `split`, `cycle_starts` (the prefill included),
`late_steps`, `refill_rows` (columns the thinking layers ran at refills), `layers_touched` (Σ layers per forward:
L at a cycle start, E + D at a late step), `plt_measured` = layers_touched / (L · new tokens) (Eq. 7 as run), and
for pricing by layer costs (`decoding.pricing.layer_forward_steps`) `num_layers` and `layer_forwards`: per decoding
forward (the prefill excluded) its segments [layers, rows]: [[E + D, 1]] at a late step, [[E + D, 1], [T, refill
columns]] at a cycle start (T thinking layers).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import torch

from ...decoding import layers as L
from ...decoding.base import Decoder, GenerationResult, StopCriteria, register_decoder
from ...decoding.batch import positions_from_mask, prepare_batch
from ...decoding.cache import select_rows
from ...decoding.static import StaticSession
from ...decoding.stopping import StopTracker
from .cyclic import is_cycle_start
from .settings import DMTDSpec, dmtd_config
from .split import combine


class DMTDState:
    """The decoding state of one batch: one per-layer cache (lengths differ by subset), the left-padding mask, the
    last absolute position of every row and the pending h_base columns. `prefill(ids, attention)` and
    `step(tokens)` return the next-token logits [B, V]; tests drive them with fixed tokens (teacher forcing)."""

    def __init__(self, model: torch.nn.Module, spec: DMTDSpec, tau: int, session: StaticSession | None = None):
        if int(tau) < 1:
            raise ValueError(f"dmtd: tau must be >= 1, got {tau}")
        L.check_supported(model)
        self.model, self.spec, self.tau = model, spec, int(tau)
        self.num_layers = L.num_layers(model)
        self.first, self.stop = spec.thinking(self.num_layers)
        self.session = session  # backend compiled: its static cache, the decoding steps' segments compiled
        self.cache = session.cache if session is not None else L.new_cache(model)
        self.step_index = 0  # generation step of the next forward (0: the prefill)
        self.padding: torch.Tensor | None = None
        self.last_pos: torch.Tensor | None = None
        self.pending: torch.Tensor | None = None  # [B, k, H] h_base of columns the thinking layers have not seen
        self.pending_pos: torch.Tensor | None = None  # [B, k]
        self.last_refill = 0  # columns of the latest refill (0 after a late-only step)

    @property
    def late_layers(self) -> int:
        """Layers a late-only step runs: the encoding and the decoding layers."""
        return self.first + self.num_layers - self.stop

    def layers_of_last_step(self) -> int:
        return self.num_layers if is_cycle_start(self.step_index - 1, self.tau) else self.late_layers

    def segments_of_last_step(self) -> list[list[int]]:
        """The last `step`'s work as [layers, rows] segments: the encoding and decoding layers on one row, and at a
        cycle start the thinking layers on the refilled columns."""
        segments = [[self.late_layers, 1]] if self.late_layers else []
        if self.last_refill:
            segments.append([self.stop - self.first, self.last_refill])
        return segments

    def prefill(self, ids: torch.Tensor, attention: torch.Tensor) -> torch.Tensor:
        """The prompt through every layer, M = 1 on every column (Fig. 3's first pass); logits of the last column."""
        if self.step_index:
            raise RuntimeError("prefill: the state has already decoded")
        pos = positions_from_mask(attention)
        self.padding = attention if self.session is None else self.session.prompt_mask(attention)
        h = L.embed(self.model, ids)
        mask = L.causal_mask(self.model, h, self.cache, pos, 0, attention)
        cs = L.rope(self.model, h, pos)
        h_base = L.run_layers(self.model, h, 0, self.first, pos=pos, mask=mask, rope=cs, cache=self.cache)
        h_think = L.run_layers(self.model, h_base, self.first, self.stop, pos=pos, mask=mask, rope=cs, cache=self.cache)
        h = combine(h_base, h_think, True, self.spec.combine)
        h = L.run_layers(self.model, h, self.stop, self.num_layers, pos=pos, mask=mask, rope=cs, cache=self.cache)
        self.last_pos = pos[:, -1]
        self.pending = h_base[:, :0]
        self.pending_pos = pos[:, :0]
        self.step_index = 1
        return L.head(self.model, h[:, -1])

    def _run(self, h: torch.Tensor, start: int, stop: int, pos: torch.Tensor, head: bool = False) -> torch.Tensor:
        """Layers [start, stop) on `h` at positions `pos` (then, with `head`, the logits of the last row); compiled
        on a static session, one graph per segment and shape."""
        if start == stop and not head:
            return h
        if self.session is None:
            return self._segment(h, pos, self.padding, start, stop, head)
        key = ("dmtd", start, stop, head, tuple(h.shape), None if self.padding is None else tuple(self.padding.shape))
        return self.session.call(self._segment, key, h, pos, self.padding, start, stop, head)

    def _segment(
        self, h: torch.Tensor, pos: torch.Tensor, padding: torch.Tensor | None, start: int, stop: int, head: bool
    ) -> torch.Tensor:
        if start < stop:
            mask = L.causal_mask(self.model, h, self.cache, pos, start, padding)
            rope = L.rope(self.model, h, pos)
            h = L.run_layers(self.model, h, start, stop, pos=pos, mask=mask, rope=rope, cache=self.cache)
        return L.head(self.model, h[:, -1]) if head else h

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """Feed one token per row (the one emitted by the previous step): a late-only step or a cycle start with its
        refill, by the generation step (module docstring); logits of the next token."""
        if self.last_pos is None:
            raise RuntimeError("step before prefill")
        if self.session is not None:
            self.session.new_step()  # this step's segments read each other's outputs: one step of CUDA graphs
        pos = (self.last_pos + 1)[:, None]
        if self.session is None:  # a static session's padding mask spans every slot already
            self.padding = torch.cat([self.padding, self.padding.new_ones(self.padding.shape[0], 1)], dim=1)
        h_base = self._run(L.embed(self.model, tokens[:, None]), 0, self.first, pos)
        self.pending = torch.cat([self.pending, h_base], dim=1)
        self.pending_pos = torch.cat([self.pending_pos, pos], dim=1)
        if is_cycle_start(self.step_index, self.tau):
            h_think = self._run(self.pending, self.first, self.stop, self.pending_pos)
            self.last_refill = self.pending.shape[1]
            h = combine(h_base, h_think[:, -1:], True, self.spec.combine)
            self.pending, self.pending_pos = self.pending[:, :0], self.pending_pos[:, :0]
        else:
            self.last_refill = 0
            h = h_base
        logits = self._run(h, self.stop, self.num_layers, pos, head=True)
        self.last_pos = pos[:, 0]
        self.step_index += 1
        return logits

    def select(self, rows: torch.Tensor) -> None:
        """Keep only batch rows `rows` (finished rows pruned): the cache of every layer, the padding, the positions
        and the pending buffer."""
        select_rows(self.cache, rows)
        self.padding, self.last_pos = self.padding[rows], self.last_pos[rows]
        self.pending, self.pending_pos = self.pending[rows], self.pending_pos[rows]

    def cache_lengths(self) -> list[int]:
        return [L.cached_length(self.cache, i) for i in range(self.num_layers)]


@register_decoder("dmtd")
class DMTDDecoder(Decoder):
    """Direct multi-token decoding (module docstring)."""

    lossless = False
    PARAMS = ("tau", "encoding_layers", "decoding_layers", "combine", "prune_finished")
    BACKENDS = ("eager", "compiled")

    def __init__(self, model: torch.nn.Module, tokenizer: Any, **params: Any):
        super().__init__(model, tokenizer, **params)
        self.spec = DMTDSpec.from_model(
            model,
            encoding_layers=params.get("encoding_layers"),
            decoding_layers=params.get("decoding_layers"),
            combine=params.get("combine"),
        )
        tau = params.get("tau", dmtd_config(model).get("cycle"))
        if tau is None:
            raise ValueError("dmtd: the model has no `config.dmtd.cycle`: give tau")
        self.tau = int(tau)
        if self.tau < 1:
            raise ValueError(f"dmtd: tau must be >= 1, got {tau}")
        self.lossless = self.tau == 1 and self.spec.combine == "select"

    def describe(self) -> dict[str, Any]:
        """The parameters as run (defaults from `config.dmtd` filled in)."""
        params = {**self.params, "tau": self.tau, "combine": self.spec.combine}
        params |= {"encoding_layers": self.spec.encoding_layers, "decoding_layers": self.spec.decoding_layers}
        return {"name": self.name, "lossless": self.lossless, "params": params}

    @torch.inference_mode()
    def generate(
        self, prompts: Sequence[Sequence[int]], max_new_tokens: int, stop: StopCriteria
    ) -> list[GenerationResult]:
        compiled = self.backend == "compiled"  # a static batch: finished rows stay
        prune = bool(self.params.get("prune_finished", True)) and not compiled
        device = next(self.model.parameters()).device
        ids, attention, _ = prepare_batch(prompts, self.tokenizer, device)
        n = len(prompts)
        tracker = StopTracker(n, stop, self.tokenizer, max_new_tokens)
        session = self.static_session(n, ids.shape[1] + max_new_tokens) if compiled else None  # a slot per column
        state = DMTDState(self.model, self.spec, self.tau, session)
        counts = {k: [0] * n for k in ("cycle_starts", "late_steps", "refill_rows", "layers_touched")}
        forwards: list[list[list[list[int]]]] = [[] for _ in range(n)]

        def count(rows: list[int]) -> None:
            start = is_cycle_start(state.step_index - 1, self.tau)
            for r in rows:  # per row, not per token
                if not tracker.done(r):
                    counts["cycle_starts" if start else "late_steps"][r] += 1
                    counts["layers_touched"][r] += state.layers_of_last_step()
                    counts["refill_rows"][r] += state.last_refill
                    if state.step_index > 1:  # a decoding step, not the prefill
                        forwards[r].append(state.segments_of_last_step())

        t0 = time.perf_counter()
        nxt = state.prefill(ids, attention).argmax(-1)
        live = list(range(n))
        count(live)
        t1 = time.perf_counter()
        while True:
            for b, t in enumerate(nxt.tolist()):
                tracker.feed(live[b], [t])
            keep = [b for b, r in enumerate(live) if not tracker.done(r)]
            if not keep:
                break
            if prune and len(keep) < len(live):
                k = torch.tensor(keep, device=device)
                state.select(k)
                live, nxt = [live[b] for b in keep], nxt[k]
            nxt = state.step(nxt).argmax(-1)
            count(live)
        t2 = time.perf_counter()
        extra: dict[str, list[Any]] = {k: v for k, v in counts.items()}
        extra["tau"] = [self.tau] * n
        extra["split"] = [self.spec.name] * n
        extra["num_layers"] = [state.num_layers] * n
        extra["layer_forwards"] = forwards
        extra["plt_measured"] = [
            lt / (state.num_layers * max(1, len(t))) for lt, t in zip(counts["layers_touched"], tracker.tokens)
        ]
        return tracker.results(prompts, [[1] * len(t) for t in tracker.tokens], (t0, t1, t2), extra)

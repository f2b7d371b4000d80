"""The E/T/D layer split of DMTD (§2.1, §3.3) and Eqs. 1-5 inside the model's own forward.

L decoder layers are cut into encoding [0, E), thinking [E, L-D) and decoding [L-D, L) layers (`ExDy`); T = L-E-D
must be >= 1, D = 0 is legal (Table 2's ExD0: the LM head reads the combined state directly).

Eq. 4 (settled by the official `modeling_mtpqwen3.py`): `combine: add` is `h_base + h_think ⊙ M` with h_base the
*encoding* output (= h_emb at E = 0, the "alternatively" paragraph otherwise); h_think already carries the residual
stream, so at a cycle start the decoding layers see h_base + h_think (τ = 1 `add` is not the vanilla function;
fine-tuning absorbs it). `combine: select` is `where(M, h_think, h_base)` (bit-exact with the vanilla model at
M ≡ 1), kept as an option.

`dmtd_hooks(model, spec, M)` installs, for the duration of one forward, a pre-hook on layer E that records its
input (h_base) and a pre-hook on layer L-D (or on the final norm when D = 0) that replaces the hidden states by
`combine(h_base, h_think, M)`. The model's own `forward` then *is* Eqs. 1-5, so `logits_to_keep`, DDP's reducer,
FSDP2's unsharding and gradient checkpointing stay in the call path. transformers 5 checkpoints a layer's `forward`,
not its `__call__`, so module hooks run once, outside the recomputed region (tested: checkpointing on/off gives the
same loss and gradients).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from ...decoding import layers as L
from .settings import COMBINES, DMTDSpec


def combine(h_base: torch.Tensor, h_think: torch.Tensor, m: torch.Tensor | bool, how: str) -> torch.Tensor:
    """Eq. 4: `add` = h_base + h_think ⊙ M, `select` = where(M, h_think, h_base); M broadcasts over [B, T] (or a
    Python bool for a whole chunk)."""
    if isinstance(m, bool):
        if how == "add":
            return h_base + h_think if m else h_base
        return h_think if m else h_base
    m = m.to(h_base.device)[..., None]
    if how == "add":
        return h_base + h_think * m.to(h_think.dtype)
    if how == "select":
        return torch.where(m.bool(), h_think, h_base)
    raise ValueError(f"combine: {how!r} is not one of {', '.join(COMBINES)}")


def _inner(model: torch.nn.Module) -> torch.nn.Module:
    """The causal LM inside a DDP wrapper (FSDP2 shards modules in place)."""
    return getattr(model, "module", model)


def _replace_hidden(args: tuple, kwargs: dict, fn: Any) -> tuple[tuple, dict]:
    if args:
        return (fn(args[0]), *args[1:]), kwargs
    key = "hidden_states" if "hidden_states" in kwargs else "input"
    return args, {**kwargs, key: fn(kwargs[key])}


def _first_hidden(args: tuple, kwargs: dict) -> torch.Tensor:
    if args:
        return args[0]
    return kwargs["hidden_states"] if "hidden_states" in kwargs else kwargs["input"]


@contextlib.contextmanager
def dmtd_hooks(model: torch.nn.Module, spec: DMTDSpec, m: torch.Tensor) -> Iterator[None]:
    """Make `model(...)` compute Eqs. 1-5 with mask `m` ([B, T] or [T], over the columns of the forward's input)
    while the context is open (module docstring)."""
    lm = _inner(model)
    layers = L.decoder_layers(lm)
    first, stop = spec.thinking(L.num_layers(lm))
    seen: dict[str, torch.Tensor] = {}

    def record(module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
        seen["base"] = _first_hidden(args, kwargs)

    def mix(module: torch.nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        if "base" not in seen:
            raise RuntimeError("dmtd_hooks: the thinking layers ran before the encoding output was recorded")
        return _replace_hidden(args, kwargs, lambda h: combine(seen.pop("base"), h, m, spec.combine))

    target = layers[stop] if stop < len(layers) else lm.model.norm
    handles = [
        layers[first].register_forward_pre_hook(record, with_kwargs=True),
        target.register_forward_pre_hook(mix, with_kwargs=True),
    ]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def base_and_thinking(
    model: torch.nn.Module,
    spec: DMTDSpec,
    ids: torch.Tensor,
    attention: torch.Tensor | None = None,
    positions: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, Any, torch.Tensor]:
    """The τ-independent part of the parallel forward (Eqs. 1-2), by hand (`mtp_core.decoding.layers`): (h_base, h_think,
    the causal mask, positions) of rows with padding mask `attention` and `positions` (default 0.., right
    padding). Every decoding-layer pass for any M reuses them."""
    first, stop = spec.thinking(L.num_layers(model))
    h = L.embed(model, ids)
    pos = positions if positions is not None else torch.arange(ids.shape[1], device=ids.device)[None]
    pos = pos.expand(ids.shape[0], -1)
    mask = L.causal_mask(model, h, None, pos, 0, attention)
    cs = L.rope(model, h, pos)
    h_base = L.run_layers(model, h, 0, first, pos=pos, mask=mask, rope=cs)
    h_think = L.run_layers(model, h_base, first, stop, pos=pos, mask=mask, rope=cs)
    return h_base, h_think, mask, pos


def decoding_hidden(
    model: torch.nn.Module,
    spec: DMTDSpec,
    h_base: torch.Tensor,
    h_think: torch.Tensor,
    m: torch.Tensor,
    mask: Any,
    pos: torch.Tensor,
) -> torch.Tensor:
    """Eqs. 4-5 up to the head, over every column: the decoding layers on combine(h_base, h_think, M) (the head
    then reads only the columns it needs: `layers.head`)."""
    stop = spec.thinking(L.num_layers(model))[1]
    h = combine(h_base, h_think, m, spec.combine)
    return L.run_layers(model, h, stop, L.num_layers(model), pos=pos, mask=mask, rope=L.rope(model, h, pos))


def parallel_logits(
    model: torch.nn.Module,
    spec: DMTDSpec,
    ids: torch.Tensor,
    m: torch.Tensor,
    attention: torch.Tensor | None = None,
    positions: torch.Tensor | None = None,
) -> torch.Tensor:
    """Logits of the parallel forward (Eqs. 1-5) under mask `m`, layer by layer: what the hooked `model(...)`
    computes, and, under the decoding schedule, what the decoder computes step by step."""
    h_base, h_think, mask, pos = base_and_thinking(model, spec, ids, attention, positions)
    return L.head(model, decoding_hidden(model, spec, h_base, h_think, m, mask, pos))

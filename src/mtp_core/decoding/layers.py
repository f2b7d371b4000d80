"""Running a subset of a Hugging Face decoder's layers by hand: explicit positions, a mask built against the
subset's first layer, one cache whose layers may hold different lengths (paper 4's cyclical refilling: a
`DynamicCache`, or on the compiled path a `StaticCache` whose layers write at their own positions; paper 2's
cascaded heads run standalone decoder layers with the same helpers).

The recipe that reproduces `model(...)` bit for bit:

```
h    = embed(model, ids)
pos  = absolute position ids, explicit (never the cache-length default, which reads layer 0 of the cache)
mask = causal_mask(model, h, cache, pos, first_layer, padding)     # BEFORE the layers append their K/V
cs   = rope(model, h, pos)
h    = run_layers(model, h, start, stop, pos=pos, mask=mask, rope=cs, cache=cache)
logits = head(model, h)                                             # final norm + lm_head
```

`logits_and_hidden` is a whole forward's logits with its final hidden states, read without transformers'
output-capturing hooks (which would sit on the layers these helpers call).

Supported: decoders whose layers are `model.model.layers`, with a rotary embedding at `model.model.rotary_emb`, a
final `model.model.norm` and full attention in every layer (Llama, Qwen2, Qwen3, Mistral without a sliding window).
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import Cache
from transformers.masking_utils import create_causal_mask

from ..config.settings import LAYER_MODEL_TYPES


class UnsupportedModel(ValueError):
    """The model's architecture cannot be run layer by layer here (the message says why)."""


def check_supported(model: torch.nn.Module) -> None:
    """Raise `UnsupportedModel` unless the model is one of `LAYER_MODEL_TYPES` with full attention in every layer."""
    cfg = model.config
    kind = getattr(cfg, "model_type", "?")
    if kind not in LAYER_MODEL_TYPES:
        raise UnsupportedModel(f"model type {kind!r}: layer subsets support {', '.join(LAYER_MODEL_TYPES)}")
    types = getattr(cfg, "layer_types", None) or ["full_attention"] * cfg.num_hidden_layers
    if (
        any(t != "full_attention" for t in types)
        or getattr(cfg, "sliding_window", None)
        and getattr(cfg, "use_sliding_window", kind == "mistral")
    ):
        raise UnsupportedModel(f"model type {kind!r} with sliding-window layers: layer subsets need full attention")


def decoder_layers(model: torch.nn.Module) -> torch.nn.ModuleList:
    return model.model.layers


def num_layers(model: torch.nn.Module) -> int:
    return int(model.config.num_hidden_layers)


def embed(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    return model.get_input_embeddings()(ids)


def rope(model: torch.nn.Module, h: torch.Tensor, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, sin) at absolute positions `pos` [B or 1, T], in `h`'s dtype (shared by all layers of one call)."""
    return model.model.rotary_emb(h, pos)


def new_cache(model: torch.nn.Module) -> DynamicCache:
    """One cache slot per decoder layer; each slot grows on its own (lengths may differ)."""
    return DynamicCache(config=model.config)


def cached_length(cache: Cache | None, layer: int) -> int:
    return 0 if cache is None else int(cache.get_seq_length(layer))


def causal_mask(
    model: torch.nn.Module,
    h: torch.Tensor,
    cache: Cache | None,
    pos: torch.Tensor,
    layer: int,
    padding: torch.Tensor | None = None,
) -> Any:
    """The attention mask of a call whose first layer is `layer`, built before the call appends K/V.

    `padding` [B, >= kv] is the 2-D 0/1 mask of every position of the sequence (left padding); it is cut to this
    layer's key length (its cached length + the new rows), since a lagging layer has not seen the latest columns.
    On a static cache (`transformers.StaticCache`, the compiled path) it spans the cache's slots as given (None: no
    padding), so that its shape stays fixed; the slots past a layer's rows are hidden by causality.
    With no padding, a one-row step and a chunk over an empty cache get the model's own causal path (None); a
    chunk on top of a cache always gets a materialised mask (None would make sdpa slice the keys)."""
    q = h.shape[1]
    if getattr(cache, "is_compileable", False):  # a static cache: `padding` spans its slots, or is None
        pad = padding
    else:
        past = cached_length(cache, layer)
        pad = None
        if padding is not None and not bool(padding[:, : past + q].all()):
            pad = padding[:, : past + q]
    return create_causal_mask(
        config=model.config, inputs_embeds=h, attention_mask=pad, cache=cache, position_ids=pos, layer_idx=layer
    )


def run_layers(
    model: torch.nn.Module,
    h: torch.Tensor,
    start: int,
    stop: int,
    *,
    pos: torch.Tensor,
    mask: Any,
    rope: tuple[torch.Tensor, torch.Tensor],
    cache: Cache | None = None,
) -> torch.Tensor:
    """Hidden states after decoder layers [start, stop); each appends its K/V to its own slot of `cache` (None:
    no cache is read or written)."""
    for layer in decoder_layers(model)[start:stop]:
        h = layer(h, mask, pos, cache, position_embeddings=rope)
    return h


def logits_and_hidden(
    model: torch.nn.Module, keep: int = 0, hidden: bool = False, **inputs: Any
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`model(**inputs)`'s logits of the last `keep` rows (0: all) and, with `hidden`, the final hidden states of
    every row (else None).

    For the `LAYER_MODEL_TYPES`: the base model's `last_hidden_state`, then the output head on the kept rows, as
    their forward computes the logits. Not `output_hidden_states`: that makes transformers install an
    output-capturing hook on every layer, for good, whose `ContextVar` read breaks the compiled graph of any code
    that later calls the layers directly (paper 4's segments: a break at every layer). Other models:
    `output_hidden_states`."""
    if not hidden:
        return model(**inputs, logits_to_keep=keep).logits, None
    if getattr(model.config, "model_type", None) not in LAYER_MODEL_TYPES:
        out = model(**inputs, logits_to_keep=keep, output_hidden_states=True)
        return out.logits, out.hidden_states[-1]
    h = model.model(**inputs).last_hidden_state
    return model.lm_head(h[:, -keep:] if keep else h), h


def head(model: torch.nn.Module, h: torch.Tensor) -> torch.Tensor:
    """Logits of hidden states after the last layer: the final norm, then the output head."""
    return model.lm_head(model.model.norm(h))

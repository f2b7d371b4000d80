"""DeepSeek-style cascaded MTP heads (DeepSeek-V3 §2.2; paper 2 §2 Eq. 1, §3.2, App. B Table 3), `arch: deepseek_mtp`.

Head k is ONE dense decoder layer of the trunk's own class on a 2d -> d projection of the normalised embedding of
the token k steps ahead and the previous depth's state, sharing the trunk's embedding, rotary embedding and output
head (read at call time, never stored: the state dict holds head weights only):

    x^k_i = W_k [ enorm_k(E(t_{i+k})) ; hnorm_k(h^{k-1}_i) ]        (embedding first, as DeepSeek-V3)
    h^k_i = outnorm_k( Block_k(x^k_i) )      causal over i, RoPE at position i
    P^k_i = lm_head(h^k_i)                   predicts t_{i+k+1}

`h^0` is the trunk's post-final-norm state (the lm_head input, `verify_tree(return_hidden=True)`'s `hidden`), and
each head passes its normalised output down the cascade (MiMo/FastMTP's convention; it makes every depth's
input the same kind of vector, which is what looping a head to a deeper depth relies on).

Depth d > K reuses head `((d - 1) mod K) + 1` (training-free looped extension, §3.3; `head_of`), with its own
cache per depth. `extend` grows the heads by copying a group (looped extension with continued pre-training,
Fig. 2; the latest group seeds the next stage).

Two ways to run a depth, one computation (`depth_forward`): `forward_train` over whole windows (every position,
the tokens rolled by k; positions past the window get `pad_id`, which causality keeps out of every scored
position), and the decoder's chunks on a per-depth `DynamicCache` with an explicit mask (`chunk_mask`).
"""

from __future__ import annotations

import copy
import importlib
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn
from transformers import AutoConfig, PretrainedConfig
from transformers.masking_utils import create_causal_mask

from ...config.settings import HEAD_CONCAT, HEAD_INITS
from .store import DraftHeads, register_heads

_DROP = ("architectures", "_name_or_path", "transformers_version", "auto_map", "quantization_config")


def block_config(trunk_config: PretrainedConfig | Mapping[str, Any]) -> PretrainedConfig:
    """The config of one head block: the trunk's with one full-attention layer (a Qwen3 layer reads
    `layer_types[layer_idx]`, so a copy of the trunk's config would not do for every index)."""
    d = trunk_config.to_dict() if isinstance(trunk_config, PretrainedConfig) else dict(trunk_config)
    d = {k: copy.deepcopy(v) for k, v in d.items() if k not in _DROP}
    kind = d.pop("model_type")
    attn = d.pop("_attn_implementation", None) or "sdpa"
    d["num_hidden_layers"] = 1
    if d.get("layer_types") is not None:
        d["layer_types"] = ["full_attention"]
    cfg = AutoConfig.for_model(kind, **d)
    cfg._attn_implementation = attn
    return cfg


def _classes(model_type: str) -> tuple[type[nn.Module], type[nn.Module]]:
    """The decoder-layer and RMSNorm classes of a transformers architecture (`modeling_<type>`)."""
    mod = importlib.import_module(f"transformers.models.{model_type}.modeling_{model_type}")
    layers = [v for k, v in vars(mod).items() if k.endswith("DecoderLayer") and isinstance(v, type)]
    norms = [v for k, v in vars(mod).items() if k.endswith("RMSNorm") and isinstance(v, type)]
    if len(layers) != 1 or len(norms) != 1:
        raise ValueError(f"model type {model_type!r}: no unique decoder layer and RMSNorm class for MTP heads")
    return layers[0], norms[0]


class MTPHead(nn.Module):
    """One depth's weights: enorm, hnorm, the 2d -> d projection (no bias), the block, outnorm; its forward is the
    whole of one depth on the trunk's shared parts (so that FSDP2, which gathers a head's weights in its forward,
    may shard each head as a unit)."""

    def __init__(self, cfg: PretrainedConfig):
        super().__init__()
        layer_cls, norm_cls = _classes(cfg.model_type)
        d, eps = cfg.hidden_size, cfg.rms_norm_eps
        self.enorm = norm_cls(d, eps=eps)
        self.hnorm = norm_cls(d, eps=eps)
        self.proj = nn.Linear(2 * d, d, bias=False)
        self.block = layer_cls(cfg, layer_idx=0)
        self.norm = norm_cls(d, eps=eps)

    def forward(
        self,
        emb: torch.Tensor,
        h_prev: torch.Tensor,
        pos: torch.Tensor,
        rotary: nn.Module,
        mask: Any = None,
        cache: Any = None,
        emb_first: bool = True,
    ) -> torch.Tensor:
        """h^k = outnorm(Block(W [enorm(emb) ; hnorm(h_prev)])) with RoPE at `pos` (`rotary`: the trunk's)."""
        e, h = self.enorm(emb), self.hnorm(h_prev)
        x = self.proj(torch.cat((e, h) if emb_first else (h, e), dim=-1))
        return self.norm(self.block(x, mask, pos, cache, position_embeddings=rotary(x, pos)))


@register_heads("deepseek_mtp")
class DeepSeekMTPHeads(DraftHeads):
    """K cascaded heads. Config: `num_heads` K, `block` (the trunk's config as a dict, `block_config`), `concat`
    (emb_first | hidden_first)."""

    def __init__(self, config: Mapping[str, Any]):
        super().__init__(config)
        if int(self.config["num_heads"]) < 1:
            raise ValueError(f"num_heads must be >= 1, got {self.config['num_heads']}")
        if self.config.get("concat", "emb_first") not in HEAD_CONCAT:
            raise ValueError(f"concat: {self.config['concat']!r} is not one of {', '.join(HEAD_CONCAT)}")
        self.block_config = block_config(self.config["block"])
        self.heads = nn.ModuleList(MTPHead(self.block_config) for _ in range(int(self.config["num_heads"])))

    @property
    def num_heads(self) -> int:
        return len(self.heads)

    def head_of(self, depth: int) -> int:
        """The head (0-based) that runs depth `depth` (1-based): ((depth - 1) mod K), the training-free loop."""
        if depth < 1:
            raise ValueError(f"depths start at 1, got {depth}")
        return (depth - 1) % self.num_heads

    def set_attn_implementation(self, name: str) -> None:
        """Run the blocks with the trunk's attention (`sdpa` | `eager`); masks follow (`chunk_mask`)."""
        self.block_config._attn_implementation = name

    @property
    def eager(self) -> bool:
        return self.block_config._attn_implementation == "eager"

    # ------------------------------------------------------------------------------------------- building

    @classmethod
    def from_trunk(
        cls, trunk: nn.Module, num_heads: int, *, init: str = "copy_last", concat: str = "emb_first", std=None
    ) -> DeepSeekMTPHeads:
        """K new heads for `trunk`. `init` (not stated by the paper; ours): `copy_last` = each block a copy of the
        trunk's last layer and outnorm of its final norm, enorm/hnorm 1, the projection nn.Linear's default (a
        pretrained trunk, embedded scale); `normal` = every matrix N(0, std) (std: the trunk's
        initializer_range), norms 1 (training from scratch, paper scale)."""
        if init not in HEAD_INITS:
            raise ValueError(f"init: {init!r} is not one of {', '.join(HEAD_INITS)}")
        heads = cls({"num_heads": int(num_heads), "block": trunk.config.to_dict(), "concat": concat})
        heads.set_attn_implementation(getattr(trunk.config, "_attn_implementation", None) or "sdpa")
        p = next(trunk.parameters())
        heads.to(device=p.device, dtype=p.dtype)
        with torch.no_grad():
            for h in heads.heads:
                if init == "copy_last":
                    h.block.load_state_dict(trunk.model.layers[-1].state_dict())
                    h.norm.load_state_dict(trunk.model.norm.state_dict())
                else:
                    sd = float(std if std is not None else getattr(trunk.config, "initializer_range", 0.02))
                    for name, w in h.named_parameters():
                        if w.dim() >= 2:
                            nn.init.normal_(w, 0.0, sd)
                        elif "norm" in name:
                            nn.init.ones_(w)
                        else:
                            nn.init.zeros_(w)
        return heads

    def extend(self, new_heads: int, group: int | None = None, source: str = "latest") -> DeepSeekMTPHeads:
        """A copy with `new_heads` more heads, head K+j an exact copy of head `src(j)` of a group of `group` heads
        (default: all K): `latest` = the last `group` heads (4 -> 8: heads 5-8 <- 1-4; 8 -> 12: 9-12 <- 5-8),
        `first` = the first `group`. "1 -> 8" is one stage of 7 copies of head 1."""
        k = self.num_heads
        group = k if group is None else int(group)
        if new_heads < 1 or not 1 <= group <= k or source not in ("latest", "first"):
            raise ValueError(f"extend: new_heads {new_heads} >= 1, group {group} in [1, {k}], source latest|first")
        out = type(self)({**self.config, "num_heads": k + int(new_heads)})
        out.set_attn_implementation(self.block_config._attn_implementation)
        p = next(self.parameters())
        out.to(device=p.device, dtype=p.dtype)
        first = k - group if source == "latest" else 0
        with torch.no_grad():
            for j in range(k + new_heads):
                src = j if j < k else first + (j - k) % group
                out.heads[j].load_state_dict(self.heads[src].state_dict())
        return out

    # ------------------------------------------------------------------------------------------- running

    def depth_forward(
        self,
        trunk: nn.Module,
        depth: int,
        h_prev: torch.Tensor,
        ids: torch.Tensor,
        pos: torch.Tensor,
        mask: Any = None,
        cache: Any = None,
    ) -> torch.Tensor:
        """h^depth at the given rows: `h_prev` [B, T, d] (h^{depth-1} at positions `pos` [B, T]) and `ids` [B, T]
        (the tokens `depth` steps ahead of each row). `mask` / `cache`: None for a causal window; a decoder's
        chunk on its per-depth cache passes both (`chunk_mask`)."""
        emb = trunk.get_input_embeddings()(ids).to(h_prev.dtype)
        emb_first = self.config.get("concat", "emb_first") == "emb_first"
        return self.heads[self.head_of(depth)](emb, h_prev, pos, trunk.model.rotary_emb, mask, cache, emb_first)

    def forward_train(
        self, trunk: nn.Module, h0: torch.Tensor, ids: torch.Tensor, depths: int | None = None, pad_id: int = 0
    ) -> list[torch.Tensor]:
        """[h^1 .. h^D] over whole windows (D = `depths`, default K; D > K loops): depth k at position i reads
        (h^{k-1}_i, t_{i+k}), the tokens rolled by k with `pad_id` after the window's end (FastMTP/torchtitan's
        roll); `h0` [B, S, d] is the trunk's post-norm state on `ids` [B, S]. Position i of depth k is meaningful
        for i <= S - 1 - k (its target t_{i+k+1} lies in the window for i <= S - 2 - k)."""
        b, s = ids.shape
        pos = torch.arange(s, device=ids.device)[None].expand(b, s)
        mask = create_causal_mask(
            config=self.block_config, inputs_embeds=h0, attention_mask=None, cache=None, position_ids=pos
        )
        out, h = [], h0
        for k in range(1, (depths or self.num_heads) + 1):
            ahead = torch.full_like(ids, int(pad_id))
            ahead[:, : max(0, s - k)] = ids[:, k:]
            h = self.depth_forward(trunk, k, h, ahead, pos, mask)
            out.append(h)
        return out


def chunk_mask(kv_valid: torch.Tensor, valid: torch.Tensor, float_dtype: torch.dtype | None = None) -> torch.Tensor:
    """The 4D mask [B, 1, Q, L + Q] of a chunk of Q rows, in position order, on a cache of L slots: row q sees the
    valid cached slots (`kv_valid` [B, L]), the valid chunk rows up to itself (`valid` [B, Q]) and always itself
    (a hole row must not be all-masked: sdpa would return NaN; its output is never used). Bool (True = attend), or
    additive 0 / finfo.min for eager attention with `float_dtype`."""
    b, q = valid.shape
    own = torch.ones(q, q, dtype=torch.bool, device=valid.device).tril()[None] & valid[:, None, :]
    own = own | torch.eye(q, dtype=torch.bool, device=valid.device)[None]
    mask = torch.cat([kv_valid.bool()[:, None, :].expand(b, q, kv_valid.shape[1]), own], dim=2)[:, None]
    if float_dtype is None:
        return mask
    return torch.zeros(mask.shape, dtype=float_dtype, device=mask.device).masked_fill(
        ~mask, torch.finfo(float_dtype).min
    )

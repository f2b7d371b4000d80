"""Hydra and Hydra++ heads (Ankner et al. 2024; zankner/Hydra `hydra/model/hydra_heads/prefix_mlp_head.py`;
anchors (b)): grounded heads, each conditioned on the tokens drafted before it.

* **Prefix layer** (Hydra++, `prefix: true`): one decoder layer of the trunk's architecture (own weights, own KV
  cache), its rotary embedding and final norm, run causally over the trunk's last hidden states of every
  committed position: e_t = Prefix(h_0 .. h_t). Built from the trunk's config with one layer (the reference's
  1-layer `LlamaModel` also carries an unused embedding table, which is left out). Without it (`prefix: false`,
  Hydra's plain grounded MLP) e_t = h_t.
* **Head i** (0-based): input cat(e_t, E(x_{t+1}), .., E(x_{t+1+i})), width H (i + 2), where x_{t+1} is the root
  (the trunk's argmax at t) and the later tokens are the drafts on the path being extended; E = the trunk's
  frozen input embedding. MLP: `CondResBlock(H (i+2) -> H)` then `num_layers - 1` ResBlocks, dropout before each
  block and before the output (`dropout`, training only; the recipe's 0.2). Output: `blocks.DraftVocab`
  (`lm_head: own` with a bias in the published checkpoint, initialised from the trunk's head; `shared` reads
  the trunk's). Head i at position t predicts x_{t+2+i}.
* The reference reuses ONE ResBlock instance for the `num_layers - 1` later blocks of a head (list
  multiplication: tied weights); here they are untied, and the tied published weights load into each.
* `init`: `hydra` keeps the modules' random initialisation (the reference); `identity` (ours, for short
  trainings) makes the prefix layer an identity residual (zero attention and MLP output projections) and the
  conditioning map R pass e_t through (R = [I, 0, ..]), so every head starts as the trunk's own next-token
  predictor applied to a renormalised h_t.

Masks are the caller's (the heads import no decoding code): `prefix_forward` takes a 4-D boolean mask
[B, 1, T, L + T] over the prefix cache and the new rows (True = attend), or None for a plain causal chunk on an
empty cache.

`load_hydra_checkpoint` maps the published `ankner/hydra-vicuna-7b-v1.3` state dict (`hydra_lm_head.pt`):
`prefix_embeding_layer.layers.0.*` and `.norm.*` (the reference's spelling; `embed_tokens` dropped),
`hydra_mlp.{i}.{j}.{linear,res_connection}.*` (j: positions in the head's Sequential; the block with
`res_connection` is the conditioning block, the others follow in order of j), `hydra_lm_head.{i}.{j}.{weight,bias}`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn
from transformers import AutoConfig, AutoModel, DynamicCache

from .blocks import CondResBlock, DraftVocab, ResBlock
from .medusa import heads_config
from .store import DraftHeads, register_heads

INITS = ("identity", "hydra")


def prefix_config(trunk_config: Mapping[str, Any]) -> Any:
    """The trunk's config (a `to_dict()`) with one layer, no vocabulary and sdpa attention: the prefix layer's."""
    d = dict(trunk_config)
    model_type = d.pop("model_type")
    cfg = AutoConfig.for_model(model_type, **d)
    cfg.num_hidden_layers = 1
    cfg.vocab_size = 1
    cfg.pad_token_id = None
    cfg.tie_word_embeddings = False
    if getattr(cfg, "layer_types", None):
        cfg.layer_types = list(cfg.layer_types[:1])
    cfg._attn_implementation = "sdpa"
    return cfg


class PrefixLayer(nn.Module):
    """One decoder layer of the trunk's architecture with its rotary embedding and final norm."""

    def __init__(self, trunk_config: Mapping[str, Any]):
        super().__init__()
        self.config = prefix_config(trunk_config)
        base = AutoModel.from_config(self.config)
        self.layer, self.norm, self.rotary = base.layers[0], base.norm, base.rotary_emb

    def new_cache(self) -> DynamicCache:
        return DynamicCache(config=self.config)

    def forward(
        self, h: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor | None, cache: DynamicCache | None
    ) -> torch.Tensor:
        """e [B, T, H] of hidden states h [B, T, H] at positions pos [B, T]; appends their K/V to `cache`."""
        x = self.layer(h, mask, pos, cache, position_embeddings=self.rotary(h, pos))
        return self.norm(x)

    def identity_init(self) -> None:
        """Zero the attention and MLP output projections: the layer passes its input through its residuals."""
        with torch.no_grad():
            for name, module in self.layer.named_modules():
                if name.endswith(("o_proj", "down_proj")):
                    module.weight.zero_()
                    if module.bias is not None:
                        module.bias.zero_()


class HydraMLP(nn.Module):
    """Head i's MLP: dropout, the conditioning block, then (dropout, ResBlock) x (num_layers - 1)."""

    def __init__(self, hidden: int, index: int, num_layers: int, dropout: float):
        super().__init__()
        self.drop = nn.Dropout(dropout)
        self.cond = CondResBlock(hidden * (index + 2), hidden)
        self.blocks = nn.ModuleList(ResBlock(hidden) for _ in range(num_layers - 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.cond(self.drop(x))
        for block in self.blocks:
            x = block(self.drop(x))
        return self.drop(x)


@register_heads("hydra")
class HydraHeads(DraftHeads):
    DEFAULTS: Mapping[str, Any] = {
        "hidden_size": None,
        "vocab_size": None,
        "num_heads": 4,
        "num_layers": 2,
        "lm_head": "shared",
        "lm_head_bias": True,
        "draft_vocab": None,
        "prefix": True,
        "trunk_config": None,
        "init": "identity",
        "dropout": 0.0,
    }

    def __init__(self, config: Mapping[str, Any]):
        cfg = heads_config(self.DEFAULTS, config, "hydra")
        if cfg["init"] not in INITS:
            raise ValueError(f"hydra heads: init {cfg['init']!r} is not one of {', '.join(INITS)}")
        if cfg["prefix"] and not cfg["trunk_config"]:
            raise ValueError("hydra heads: a prefix layer needs the trunk's config (trunk_config)")
        super().__init__(cfg)
        h, k, layers = int(cfg["hidden_size"]), int(cfg["num_heads"]), int(cfg["num_layers"])
        self.prefix = PrefixLayer(cfg["trunk_config"]) if cfg["prefix"] else None
        self.mlps = nn.ModuleList(HydraMLP(h, i, layers, float(cfg["dropout"])) for i in range(k))
        own = cfg["lm_head"] == "own"
        self.out = DraftVocab(h, int(cfg["vocab_size"]), k, cfg["draft_vocab"], own, own and bool(cfg["lm_head_bias"]))
        self._embed: tuple[nn.Module, ...] = ()
        if cfg["init"] == "identity":
            self.identity_init()

    @property
    def num_heads(self) -> int:
        return len(self.mlps)

    @classmethod
    def for_trunk(cls, trunk: nn.Module, **config: Any) -> HydraHeads:
        """Fresh heads sized for `trunk` (its config for the prefix layer; own output heads start as its head)."""
        base = {"hidden_size": trunk.config.hidden_size, "vocab_size": _vocab(trunk)}
        if config.get("prefix", True):
            base["trunk_config"] = trunk.config.to_dict()
        heads = cls({**base, **config})
        heads.out.init_own(trunk.get_output_embeddings().weight)
        return heads.to(next(trunk.parameters()).dtype)

    def identity_init(self) -> None:
        h = int(self.config["hidden_size"])
        with torch.no_grad():
            if self.prefix is not None:
                self.prefix.identity_init()
            for mlp in self.mlps:
                mlp.cond.res.weight.zero_()
                mlp.cond.res.weight[:, :h] = torch.eye(h)
                mlp.cond.res.bias.zero_()

    def bind(self, trunk: nn.Module) -> HydraHeads:
        """Read the trunk's embedding and output head (never stored in the state dict)."""
        self._embed = (trunk.get_input_embeddings(),)
        self.out.bind(trunk.get_output_embeddings().weight)
        return self

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        if not self._embed:
            raise RuntimeError("heads not bound to a trunk: call heads.bind(model) first")
        return self._embed[0](tokens)

    def new_prefix_cache(self) -> DynamicCache | None:
        return self.prefix.new_cache() if self.prefix is not None else None

    def prefix_forward(
        self, h: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor | None, cache: DynamicCache | None
    ) -> torch.Tensor:
        """e [B, T, H]: the prefix layer on the trunk's hidden states (h itself without a prefix layer)."""
        return h if self.prefix is None else self.prefix(h, pos, mask, cache)

    def head_logits(self, head: int, e: torch.Tensor, token_emb: torch.Tensor) -> torch.Tensor:
        """[..., V'] logits of head `head` from e [..., H] and the embeddings [..., head + 1, H] of the root and
        the drafts before the predicted token."""
        if token_emb.shape[-2] != head + 1:
            raise ValueError(f"head {head} reads {head + 1} token embeddings, got {token_emb.shape[-2]}")
        x = torch.cat([e[..., None, :], token_emb], dim=-2).flatten(-2)
        return self.out.logits(self.mlps[head](x), head)


def _vocab(trunk: nn.Module) -> int:
    return int(trunk.get_output_embeddings().weight.shape[0])


_PREFIX = "prefix_embeding_layer."
_MLP_KEY = re.compile(r"^hydra_mlp\.(\d+)\.(\d+)\.(linear|res_connection)\.(weight|bias)$")
_LM_KEY = re.compile(r"^hydra_lm_head\.(\d+)\.(?:(\d+)\.)?(weight|bias)$")


def load_hydra_checkpoint(
    state: Mapping[str, torch.Tensor], hydra_config: Mapping[str, Any], trunk_config: Mapping[str, Any]
) -> HydraHeads:
    """Published Hydra / Hydra++ heads (module docstring) as `HydraHeads` (own output heads with bias, no draft
    vocabulary, `init: hydra`). `hydra_config` is the checkpoint's config.json (`hydra_num_heads`,
    `hydra_num_layers`, `hydra_head_arch` mlp | prefix-mlp, `grounded_heads`); `trunk_config` the base model's
    config (a `to_dict()`). Unexpected keys raise ValueError naming them."""
    arch = hydra_config.get("hydra_head_arch", "mlp")
    if arch not in ("mlp", "prefix-mlp") or not hydra_config.get("grounded_heads", False):
        raise ValueError(f"Hydra checkpoint: only grounded mlp / prefix-mlp heads load here, not {arch!r}")
    k, layers = int(hydra_config["hydra_num_heads"]), int(hydra_config["hydra_num_layers"])
    mlp: dict[int, dict[int, dict[str, torch.Tensor]]] = {}
    ours: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        if key.startswith(_PREFIX):
            rest = key[len(_PREFIX) :]
            if rest.startswith("layers.0."):
                ours["prefix.layer." + rest[len("layers.0.") :]] = value
            elif rest.startswith("norm."):
                ours["prefix." + rest] = value
            elif not rest.startswith(("embed_tokens.", "rotary_emb.")):
                raise ValueError(f"Hydra checkpoint: unexpected prefix-layer key {key!r}")
        elif m := _MLP_KEY.match(key):
            mlp.setdefault(int(m.group(1)), {}).setdefault(int(m.group(2)), {})[f"{m.group(3)}.{m.group(4)}"] = value
        elif m := _LM_KEY.match(key):
            ours[f"out.own.{int(m.group(1))}.{m.group(3)}"] = value
        else:
            raise ValueError(f"Hydra checkpoint: unexpected key {key!r}")
    if sorted(mlp) != list(range(k)):
        raise ValueError(f"Hydra checkpoint: MLPs of heads {sorted(mlp)}, config says {k} heads")
    for i, blocks in mlp.items():
        cond = [j for j, p in blocks.items() if "res_connection.weight" in p]
        plain = sorted(j for j in blocks if j not in cond)
        if len(cond) != 1 or not plain and layers > 1:
            raise ValueError(f"Hydra checkpoint: head {i} needs one conditioning block and {layers - 1} ResBlocks")
        for name, v in blocks[cond[0]].items():
            ours[f"mlps.{i}.cond.{name.replace('res_connection', 'res')}"] = v
        for b in range(layers - 1):  # tied in the reference: fewer saved blocks than layers reuse the last
            for name, v in blocks[plain[min(b, len(plain) - 1)]].items():
                ours[f"mlps.{i}.blocks.{b}.{name}"] = v.clone()
    w = ours.get("out.own.0.weight")
    if w is None:
        raise ValueError("Hydra checkpoint: no hydra_lm_head weights")
    heads = HydraHeads(
        {
            "hidden_size": int(w.shape[1]),
            "vocab_size": int(w.shape[0]),
            "num_heads": k,
            "num_layers": layers,
            "lm_head": "own",
            "lm_head_bias": "out.own.0.bias" in ours,
            "prefix": arch == "prefix-mlp",
            "trunk_config": dict(trunk_config) if arch == "prefix-mlp" else None,
            "init": "hydra",
        }
    )
    heads.load_state_dict(ours)
    return heads


def hydra_checkpoint(heads: HydraHeads, base_model: str) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """(state dict, config.json) of `heads` in the published layout that `load_hydra_checkpoint` reads (own output
    heads only): what a stand-in of a published checkpoint is written from (`mtp_core.data.hub`, `models.hub`). The prefix
    layer's unused embedding table, which the published file carries, is written at the output heads' size."""
    cfg = heads.config
    if cfg["lm_head"] != "own" or cfg["draft_vocab"] is not None:
        raise ValueError("hydra_checkpoint: the published layout has own output heads over the whole vocabulary")
    ours = heads.state_dict()
    state: dict[str, torch.Tensor] = {}
    for key, value in ours.items():
        if key.startswith("prefix.layer."):
            state[_PREFIX + "layers.0." + key[len("prefix.layer.") :]] = value.clone()
        elif key.startswith("prefix.norm."):
            state[_PREFIX + key[len("prefix.") :]] = value.clone()
        elif m := re.match(r"^mlps\.(\d+)\.cond\.(linear|res)\.(weight|bias)$", key):
            name = "res_connection" if m.group(2) == "res" else "linear"
            state[f"hydra_mlp.{m.group(1)}.0.{name}.{m.group(3)}"] = value.clone()
        elif m := re.match(r"^mlps\.(\d+)\.blocks\.(\d+)\.linear\.(weight|bias)$", key):
            state[f"hydra_mlp.{m.group(1)}.{int(m.group(2)) + 1}.linear.{m.group(3)}"] = value.clone()
        elif m := re.match(r"^out\.own\.(\d+)\.(weight|bias)$", key):
            state[f"hydra_lm_head.{m.group(1)}.{m.group(2)}"] = value.clone()
        else:
            raise ValueError(f"hydra_checkpoint: no published name for {key!r}")
    if heads.prefix is not None:
        state[_PREFIX + "embed_tokens.weight"] = torch.zeros_like(ours["out.own.0.weight"])
    config = {
        "hydra_num_heads": heads.num_heads,
        "hydra_num_layers": int(cfg["num_layers"]),
        "hydra_head_arch": "prefix-mlp" if heads.prefix is not None else "mlp",
        "grounded_heads": True,
        "base_model_name_or_path": base_model,
    }
    return state, config

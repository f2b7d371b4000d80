"""Medusa-1 heads (Cai et al. 2024; FasterDecoding/Medusa `medusa_model.py`; anchors (a)): K independent heads on
the trunk's last hidden state h_t (post-norm, the `lm_head` input), head j = `ResBlock^L` then the output
projection; head j at position t predicts the token t + 2 + j (the root x_{t+1} is the trunk's own argmax).

Config: `hidden_size`, `vocab_size` (the trunk's), `num_heads` (Medusa's default 5; paper 5 uses 4 = the depth of
its trees), `num_layers` (1), `lm_head` shared | own (`blocks.DraftVocab`), `draft_vocab` (None = all tokens).
Medusa repeats one ResBlock instance when num_layers > 1 (tied layers, a quirk of its list multiplication);
here the layers are untied, and a tied checkpoint loads with equal values in each.

`load_medusa_checkpoint` maps the published `FasterDecoding/medusa-vicuna-7b-v1.3` state dict (`medusa_lm_head.pt`:
`{i}.{l}.linear.{weight,bias}` for the blocks, `{i}.{L}.weight` for the bias-free output, optionally under a
`medusa_head.` prefix) into these modules; its config claims 2 heads but the file holds 5, which the reference
loader forces (anchors (a)): the head count is read from the keys.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from .blocks import DraftVocab, ResBlock
from .store import DraftHeads, register_heads

LM_HEADS = ("shared", "own")


def heads_config(defaults: Mapping[str, Any], config: Mapping[str, Any], arch: str) -> dict[str, Any]:
    """`defaults` updated by `config`; unknown keys, a missing trunk size or a bad `lm_head` raise ValueError."""
    unknown = sorted(set(config) - set(defaults))
    if unknown:
        raise ValueError(f"{arch} heads: unknown config key(s) {', '.join(unknown)} (known: {', '.join(defaults)})")
    cfg = {**defaults, **config}
    for key in ("hidden_size", "vocab_size"):
        if not cfg.get(key):
            raise ValueError(f"{arch} heads: {key} is required (the trunk's)")
    if cfg["lm_head"] not in LM_HEADS:
        raise ValueError(f"{arch} heads: lm_head {cfg['lm_head']!r} is not one of {', '.join(LM_HEADS)}")
    if int(cfg["num_heads"]) < 1 or int(cfg["num_layers"]) < 1:
        raise ValueError(f"{arch} heads: num_heads and num_layers must be >= 1")
    return cfg


@register_heads("medusa")
class MedusaHeads(DraftHeads):
    DEFAULTS: Mapping[str, Any] = {
        "hidden_size": None,
        "vocab_size": None,
        "num_heads": 4,
        "num_layers": 1,
        "lm_head": "shared",
        "draft_vocab": None,
    }

    def __init__(self, config: Mapping[str, Any]):
        cfg = heads_config(self.DEFAULTS, config, "medusa")
        super().__init__(cfg)
        h, k = int(cfg["hidden_size"]), int(cfg["num_heads"])
        self.blocks = nn.ModuleList(
            nn.Sequential(*(ResBlock(h) for _ in range(int(cfg["num_layers"])))) for _ in range(k)
        )
        self.out = DraftVocab(h, int(cfg["vocab_size"]), k, cfg["draft_vocab"], cfg["lm_head"] == "own", bias=False)

    @property
    def num_heads(self) -> int:
        return len(self.blocks)

    @classmethod
    def for_trunk(cls, trunk: nn.Module, **config: Any) -> MedusaHeads:
        """Fresh heads sized for `trunk` (own output heads start as its `lm_head`)."""
        heads = cls({"hidden_size": trunk.config.hidden_size, "vocab_size": _vocab(trunk), **config})
        heads.out.init_own(trunk.get_output_embeddings().weight)
        return heads.to(next(trunk.parameters()).dtype)

    def bind(self, trunk: nn.Module) -> MedusaHeads:
        """Read the trunk's output head (shared heads); call once the trunk and heads sit on their device."""
        self.out.bind(trunk.get_output_embeddings().weight)
        return self

    def head_logits(self, h: torch.Tensor, head: int) -> torch.Tensor:
        """[..., V'] logits of head `head` on hidden states h [..., H]."""
        return self.out.logits(self.blocks[head](h), head)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """[..., K, V'] logits of every head on hidden states h [..., H]."""
        return torch.stack([self.head_logits(h, j) for j in range(self.num_heads)], dim=-2)


def _vocab(trunk: nn.Module) -> int:
    return int(trunk.get_output_embeddings().weight.shape[0])


_MEDUSA_KEY = re.compile(r"^(?:medusa_head\.)?(\d+)\.(\d+)\.(linear\.weight|linear\.bias|weight)$")


def load_medusa_checkpoint(state: Mapping[str, torch.Tensor], hidden_size: int, vocab_size: int) -> MedusaHeads:
    """Published Medusa-1 heads (module docstring) as `MedusaHeads` with own output heads and no draft vocabulary;
    a key that does not fit raises ValueError naming it."""
    blocks: dict[tuple[int, int], dict[str, torch.Tensor]] = {}
    outs: dict[int, torch.Tensor] = {}
    for key, value in state.items():
        m = _MEDUSA_KEY.match(key)
        if m is None:
            raise ValueError(f"Medusa checkpoint: unexpected key {key!r}")
        head, index, name = int(m.group(1)), int(m.group(2)), m.group(3)
        if name == "weight":
            outs[head] = value
        else:
            blocks.setdefault((head, index), {})[name.split(".")[1]] = value
    heads = sorted(outs)
    if not heads or heads != list(range(len(heads))):
        raise ValueError(f"Medusa checkpoint: output heads {heads} are not 0..K-1")
    layers = sorted({i for h, i in blocks if h == 0})
    if layers != list(range(len(layers))) or any(sorted(i for h, i in blocks if h == k) != layers for k in heads):
        raise ValueError("Medusa checkpoint: every head needs the same ResBlocks 0..L-1 before its output layer")
    out = MedusaHeads(
        {
            "hidden_size": hidden_size,
            "vocab_size": vocab_size,
            "num_heads": len(heads),
            "num_layers": len(layers),
            "lm_head": "own",
        }
    )
    ours: dict[str, torch.Tensor] = {}
    for (head, index), params in blocks.items():
        for name, value in params.items():
            ours[f"blocks.{head}.{index}.linear.{name}"] = value
    for head, w in outs.items():
        ours[f"out.own.{head}.weight"] = w
    out.load_state_dict(ours)
    return out


def medusa_checkpoint(heads: MedusaHeads, base_model: str) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """(state dict, config.json) of `heads` in the published layout that `load_medusa_checkpoint` reads (own,
    bias-free output heads over the whole vocabulary): what a stand-in of a published checkpoint is written from."""
    cfg = heads.config
    if cfg["lm_head"] != "own" or cfg["draft_vocab"] is not None:
        raise ValueError("medusa_checkpoint: the published layout has own output heads over the whole vocabulary")
    layers = int(cfg["num_layers"])
    state: dict[str, torch.Tensor] = {}
    for key, value in heads.state_dict().items():
        if m := re.match(r"^blocks\.(\d+)\.(\d+)\.linear\.(weight|bias)$", key):
            state[f"{m.group(1)}.{m.group(2)}.linear.{m.group(3)}"] = value.clone()
        elif m := re.match(r"^out\.own\.(\d+)\.weight$", key):
            state[f"{m.group(1)}.{layers}.weight"] = value.clone()
        else:
            raise ValueError(f"medusa_checkpoint: no published name for {key!r}")
    config = {"medusa_num_heads": heads.num_heads, "medusa_num_layers": layers, "base_model_name_or_path": base_model}
    return state, config

"""Published heads into the one save format (paper scale: the paper decodes Vicuna-7B with
`ankner/hydra-vicuna-7b-v1.3` and compares with `FasterDecoding/medusa-vicuna-7b-v1.3`).

A checkpoint is a directory (`source: local`, `path`) or a hub repository (`source: hub`, `id`, downloaded with
`huggingface_hub`) holding `config.json` and the heads' state dict: `hydra_lm_head.pt` (Hydra) or
`medusa_lm_head.pt` (Medusa), or the same names with `.safetensors`. The arch is read from the config
(`hydra_head_arch` / `medusa_num_heads`); the key maps are the core's loaders (`heads.hydra.load_hydra_checkpoint`,
`heads.medusa.load_medusa_checkpoint`). The result is saved with the trunk's fingerprint, so decoding refuses a
trunk other than the one given here.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from ...io import InputError
from ...models.heads import DraftHeads, save_heads
from ...models.heads.hydra import load_hydra_checkpoint
from ...models.heads.medusa import load_medusa_checkpoint

STATE_FILES = {"hydra": "hydra_lm_head", "medusa": "medusa_lm_head"}


def _fetch(spec: Mapping[str, Any], name: str) -> Path | None:
    if spec.get("source", "local") == "local":
        p = Path(spec["path"]) / name
        return p if p.is_file() else None
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError

    try:
        return Path(hf_hub_download(spec["id"], name))
    except EntryNotFoundError:
        return None


def _state(spec: Mapping[str, Any], stem: str) -> dict[str, torch.Tensor] | None:
    for suffix in (".safetensors", ".pt"):
        f = _fetch(spec, stem + suffix)
        if f is not None:
            if suffix == ".safetensors":
                from safetensors.torch import load_file

                return load_file(str(f))
            return torch.load(f, map_location="cpu", weights_only=True)
    return None


def read_checkpoint(spec: Mapping[str, Any], trunk: torch.nn.Module) -> DraftHeads:
    """The published heads of `spec` (module docstring) as core heads sized for `trunk`."""
    where = spec.get("path") or spec.get("id")
    cfg_file = _fetch(spec, "config.json")
    if cfg_file is None:
        raise InputError(f"{where}: no config.json (not a Medusa or Hydra checkpoint)")
    cfg = json.loads(cfg_file.read_text())
    arch = "hydra" if "hydra_head_arch" in cfg or "hydra_num_heads" in cfg else "medusa"
    state = _state(spec, STATE_FILES[arch])
    if state is None:
        raise InputError(f"{where}: no {STATE_FILES[arch]}.pt or .safetensors")
    if arch == "hydra":
        return load_hydra_checkpoint(state, cfg, trunk.config.to_dict())
    w = trunk.get_output_embeddings().weight
    return load_medusa_checkpoint(state, int(w.shape[1]), int(w.shape[0]))


def import_heads(spec: Mapping[str, Any], trunk: torch.nn.Module, out: str | os.PathLike, trunk_name: str) -> Path:
    heads = read_checkpoint(spec, trunk)
    p = next(trunk.parameters())
    heads.to(device=p.device, dtype=p.dtype)
    return save_heads(heads, out, trunk, trunk_name=trunk_name, extra={"imported_from": dict(spec)})

"""The heads' base class, their registry by `arch`, and the one save format (`heads.safetensors` + `heads.json`)."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar

import torch
from safetensors.torch import load_file, save_file

from ...io import atomic_dir
from ..cpu_linear import PackedLinear, pack_linears

FORMAT = 1
WEIGHTS, META = "heads.safetensors", "heads.json"
_ARCHS: dict[str, type[DraftHeads]] = {}


class HeadsMismatch(ValueError):
    """Heads loaded on a trunk other than the one they were trained on (or of another shape)."""


class DraftHeads(torch.nn.Module):
    """Base of every kind of draft head. `config` is a JSON-ready dict, enough to rebuild the module empty
    (`cls(config)`); the weights come from the state dict. Subclasses set `arch` and register it."""

    arch: ClassVar[str] = "?"

    def __init__(self, config: Mapping[str, Any]):
        super().__init__()
        self.config = dict(config)


def register_heads(arch: str) -> Callable[[type[DraftHeads]], type[DraftHeads]]:
    def wrap(cls: type[DraftHeads]) -> type[DraftHeads]:
        if arch in _ARCHS and _ARCHS[arch] is not cls:
            raise ValueError(f"heads arch {arch!r} registered twice")
        cls.arch = arch
        _ARCHS[arch] = cls
        return cls

    return wrap


def head_archs() -> dict[str, type[DraftHeads]]:
    return dict(sorted(_ARCHS.items()))


# a sample of the trunk's weights: enough to tell fine-tunes apart, cheap to hash
def _sample(model: torch.nn.Module) -> list[torch.Tensor]:
    emb = model.get_input_embeddings().weight
    out = [emb[: min(2048, emb.shape[0])], model.model.norm.weight]
    last = model.model.layers[-1]
    out += [p for p in last.parameters()]
    head = model.get_output_embeddings()
    if head is not None and head.weight.data_ptr() != emb.data_ptr():
        out.append(head.weight[: min(2048, head.weight.shape[0])])
    return out


def trunk_fingerprint(model: torch.nn.Module) -> str:
    """A hash of a sample of the trunk's weights rounded to bfloat16, so that the same checkpoint loaded in
    float32 or bfloat16 gives the same fingerprint and a fine-tuned trunk a different one."""
    h = hashlib.sha256()
    with torch.no_grad():
        for t in _sample(model):
            h.update(t.detach().to("cpu", torch.bfloat16).view(torch.int16).numpy().tobytes())
    return h.hexdigest()[:16]


def trunk_info(model: torch.nn.Module, name: str | None = None) -> dict[str, Any]:
    cfg = model.config
    return {
        "name": name,
        "model_type": getattr(cfg, "model_type", None),
        "hidden_size": int(cfg.hidden_size),
        "vocab_size": int(model.get_input_embeddings().weight.shape[0]),
        "num_layers": int(cfg.num_hidden_layers),
        "fingerprint": trunk_fingerprint(model),
    }


def save_heads(
    heads: DraftHeads,
    path: str | os.PathLike,
    trunk: torch.nn.Module | Mapping[str, Any],
    *,
    trunk_name: str | None = None,
    extra: Mapping[str, Any] | None = None,
) -> Path:
    """Write `heads` (weights only) and `heads.json` to directory `path` atomically; returns the directory.
    `trunk`: the trunk, or its `trunk_info` taken earlier (a trunk whose layers FSDP2 has since sharded)."""
    meta = {
        "format": FORMAT,
        "arch": heads.arch,
        "config": heads.config,
        "trunk": dict(trunk) if isinstance(trunk, Mapping) else trunk_info(trunk, trunk_name),
        "extra": dict(extra or {}),
    }
    state = {k: v.detach().to("cpu").contiguous() for k, v in heads.state_dict().items()}
    with atomic_dir(path) as tmp:
        save_file(state, str(Path(tmp) / WEIGHTS))
        (Path(tmp) / META).write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
    return Path(path)


def read_heads_meta(path: str | os.PathLike) -> dict[str, Any]:
    f = Path(path) / META
    if not f.is_file():
        raise FileNotFoundError(f"{path}: no {META} (not a heads directory)")
    meta = json.loads(f.read_text())
    if meta.get("format") != FORMAT:
        raise ValueError(f"{f}: heads format {meta.get('format')!r}, this code reads {FORMAT}")
    if meta.get("arch") not in _ARCHS:
        raise ValueError(f"{f}: unknown heads arch {meta.get('arch')!r} (known: {', '.join(head_archs())})")
    return meta


def load_heads(path: str | os.PathLike, trunk: torch.nn.Module | None = None, *, check: bool = True) -> DraftHeads:
    """The heads saved in `path`, on the trunk's device and dtype, their linear layers on the trunk's kernel (oneDNN
    where the trunk's are: `models.cpu_linear`). With a `trunk` and `check`, a trunk of another shape or
    fingerprint raises `HeadsMismatch` naming both."""
    meta = read_heads_meta(path)
    if trunk is not None and check:
        have, want = trunk_info(trunk), meta["trunk"]
        for key in ("hidden_size", "vocab_size", "fingerprint"):
            if have[key] != want[key]:
                raise HeadsMismatch(
                    f"{path}: heads trained on trunk {want.get('name')!r} ({key} {want[key]}), "
                    f"loaded on a trunk with {key} {have[key]}"
                )
    heads = _ARCHS[meta["arch"]](meta["config"])
    heads.load_state_dict(load_file(str(Path(path) / WEIGHTS)))
    if trunk is not None:
        p = next(trunk.parameters())
        heads.to(device=p.device, dtype=p.dtype)
        if any(isinstance(m, PackedLinear) for m in trunk.modules()):
            pack_linears(heads)
    return heads.eval()

"""Stand-ins for published draft heads (paper 5's `ankner/hydra-vicuna-7b-v1.3` and
`FasterDecoding/medusa-vicuna-7b-v1.3`): random heads sized for the stand-in of their base model, written in the
published layout (`config.json` + `hydra_lm_head.pt` / `medusa_lm_head.pt`, float16 as published) by the writers
that sit beside the loaders (`heads.hydra.hydra_checkpoint`, `heads.medusa.medusa_checkpoint`), so the import reads
them exactly as it reads the published repositories."""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from ...io import atomic_dir
from ..heads.hydra import HydraHeads, hydra_checkpoint
from ..heads.medusa import MedusaHeads, medusa_checkpoint

FORMATS = {"hydra": "hydra_lm_head.pt", "medusa": "medusa_lm_head.pt"}


def write_heads_standin(spec: dict, base_dir: str | os.PathLike, out_dir: str | os.PathLike) -> Path:
    """`spec`: `format` hydra | medusa, `base` (the base model's hub id, recorded in the config), `num_heads`,
    `num_layers`, `init_seed`; `base_dir` the base model's stand-in folder."""
    from transformers import AutoModelForCausalLM

    if spec["format"] not in FORMATS:
        raise ValueError(f"hub_mirror: heads format {spec['format']!r} is not one of {', '.join(FORMATS)}")
    trunk = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    torch.manual_seed(int(spec.get("init_seed", 0)))
    kw = {"num_heads": int(spec["num_heads"]), "num_layers": int(spec["num_layers"]), "lm_head": "own"}
    if spec["format"] == "hydra":
        heads = HydraHeads.for_trunk(trunk, init="hydra", prefix=True, **kw)
    else:
        heads = MedusaHeads.for_trunk(trunk, **kw)
    with torch.no_grad():  # trained-looking weights: the published blocks are not at their zero initialisation
        for name, p in heads.named_parameters():
            if not name.startswith("out."):
                p.normal_(0.0, 0.02)
    write = hydra_checkpoint if spec["format"] == "hydra" else medusa_checkpoint
    state, config = write(heads, spec["base"])
    with atomic_dir(out_dir) as tmp:
        torch.save({k: v.to(torch.float16) for k, v in state.items()}, tmp / FORMATS[spec["format"]])
        (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return Path(out_dir)

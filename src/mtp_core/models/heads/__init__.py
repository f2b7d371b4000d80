"""Draft heads on a frozen or trained trunk, one save format and one loading path for every kind: DeepSeek-style
cascaded MTP heads (paper 2), Medusa and Hydra heads (paper 5).

A head module subclasses `DraftHeads` and registers its `arch` (`register_heads`); `save_heads` writes its weights
alone (`heads.safetensors`) with `heads.json` (arch, its config, the trunk it was trained on: name, shape and a
weight fingerprint); `load_heads` rebuilds it and refuses a trunk whose fingerprint differs (`HeadsMismatch`).
The embedding and output head stay the trunk's: heads read them at call time and never store them.
"""

from . import deepseek, hydra, medusa  # noqa: F401  (registration of the heads' archs)
from .store import (
    FORMAT,
    DraftHeads,
    HeadsMismatch,
    head_archs,
    load_heads,
    read_heads_meta,
    register_heads,
    save_heads,
    trunk_fingerprint,
    trunk_info,
)

__all__ = [
    "FORMAT",
    "DraftHeads",
    "HeadsMismatch",
    "head_archs",
    "load_heads",
    "read_heads_meta",
    "register_heads",
    "save_heads",
    "trunk_fingerprint",
    "trunk_info",
]

"""Decoding: one `Decoder` interface, a registry, and the decoders of every paper."""

from .base import (
    DECODERS,
    Decoder,
    GenerationResult,
    StopCriteria,
    build_decoder,
    register_decoder,
    registry_name,
)
from . import greedy, hf, mtp, probing, prompt_lookup  # noqa: F401  (registration)
from .tree import Draft, TreeContext, TreeDecoder, TreeState, verify_tree

__all__ = [
    "DECODERS",
    "Decoder",
    "Draft",
    "GenerationResult",
    "StopCriteria",
    "TreeContext",
    "TreeDecoder",
    "TreeState",
    "build_decoder",
    "register_decoder",
    "registry_name",
    "verify_tree",
]

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
from . import greedy, hf, lookahead, mtp, probing, prompt_lookup, stand  # noqa: F401  (registration)
from .cost import CostModel, WallClockGuard
from .lookahead import LookaheadDecoder
from .ngram import PathDraftDecoder
from .stand import StandDecoder
from .tree import Draft, TreeContext, TreeDecoder, TreeState, verify_tree

__all__ = [
    "DECODERS",
    "CostModel",
    "Decoder",
    "Draft",
    "GenerationResult",
    "LookaheadDecoder",
    "PathDraftDecoder",
    "StandDecoder",
    "StopCriteria",
    "TreeContext",
    "TreeDecoder",
    "TreeState",
    "WallClockGuard",
    "build_decoder",
    "register_decoder",
    "registry_name",
    "verify_tree",
]

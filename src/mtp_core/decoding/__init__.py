"""Decoding: one `Decoder` interface and its registry (papers add theirs: `mtp_core.registry`), reference greedy and
HF greedy, the tree-verification core, the wall-clock guard and the training-free n-gram drafters (prompt lookup,
lookahead, STAND), every paper's baselines."""

from . import greedy, hf, lookahead, prompt_lookup, stand  # noqa: F401  (registration)
from .base import (
    Decoder,
    GenerationResult,
    StopCriteria,
    build_decoder,
    decoder_class,
    decoders,
    register_decoder,
    registry_name,
)
from .cost import CostModel, WallClockGuard
from .lookahead import LookaheadDecoder
from .ngram import PathDraftDecoder
from .stand import StandDecoder
from .tree import Draft, TreeContext, TreeDecoder, TreeState, verify_tree

__all__ = [
    "decoders",
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
    "decoder_class",
    "register_decoder",
    "registry_name",
    "verify_tree",
]

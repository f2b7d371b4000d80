"""Decoding: one `Decoder` interface, a registry, and the decoders of every paper."""

from .base import DECODERS, Decoder, GenerationResult, StopCriteria, build_decoder, register_decoder
from . import greedy, hf  # noqa: F401  (registration)

__all__ = ["DECODERS", "Decoder", "GenerationResult", "StopCriteria", "build_decoder", "register_decoder"]

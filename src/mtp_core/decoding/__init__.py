"""Decoding: one `Decoder` interface and its registry (papers add theirs: `mtp_core.config.registry`), reference greedy and
HF greedy, the tree-verification core, the wall-clock guard and the training-free n-gram drafters (prompt lookup,
lookahead, STAND), every paper's baselines.

The names below load their module on first use (PEP 562), so that importing the package (e.g. for
`GenerationResult` in `mtp_core.results.write`, or in the Snakefile) imports no torch model code; the registry imports
the decoder modules when it is first asked (`decoders()`).
"""

from ..io import lazy_exports

_WHERE = {
    "Decoder": "base",
    "GenerationResult": "base",
    "StopCriteria": "base",
    "build_decoder": "base",
    "decoder_class": "base",
    "decoders": "base",
    "register_decoder": "base",
    "registry_name": "base",
    "check_decoder": "catalog",
    "decoder_names": "catalog",
    "CostModel": "cost",
    "WallClockGuard": "cost",
    "LookaheadDecoder": "lookahead",
    "PathDraftDecoder": "ngram",
    "StandDecoder": "stand",
    "Draft": "tree",
    "TreeContext": "tree",
    "TreeDecoder": "tree",
    "TreeState": "tree",
    "verify_tree": "tree",
}
__all__ = sorted(_WHERE)
__getattr__ = lazy_exports(__name__, _WHERE)

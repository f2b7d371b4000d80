"""Paper 3, training-free multi-token prediction by embedding-space probing:
mask embeddings injected into a frozen model draft future tokens, organised in a dynamic draft tree within a block
complexity and verified losslessly; baselines are prompt lookup, lookahead and STAND (in the core's `decoding`).

Modules: `plan` (config section -> decoding jobs, result files, checks), `probing` (the `probing` decoder, §3.1-3.5),
`draft_trees` (tree shapes, pruning, §3.3-3.5), `alignment` (Figure 2, §3.2), `report` (Tables 1-2, Figures 2, 4, 5).
"""

from ...config.registry import Paper
from .plan import P3Plan

PAPER = Paper(
    name="p3",
    title="Training-free probing",
    plan=P3Plan,
    decoders=("mtp_core.papers.p3.probing",),
)

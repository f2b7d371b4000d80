"""One package per paper, over the shared core (README "Layout"). Each builds a `mtp_core.config.registry.Paper` in its
`__init__` and names it as an entry point of the group `mtp_core.papers` (pyproject.toml); a paper imports the
core and never another paper (the import-linter contracts in pyproject.toml keep it so).

* `p1`: MTP via self-distillation (mask-token students, Static k / ConfAdapt)
* `p3`: training-free probing (mask embeddings in a frozen model, dynamic draft trees)
"""

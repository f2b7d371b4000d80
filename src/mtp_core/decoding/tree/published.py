"""The published trees, vendored in `published_trees.json`: Medusa's and Hydra's default `mc_sim_7b_63` (63 nodes)
and Hydra's `single`, as choice paths (no torch: the workflow's plan checks read them)."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

MEDUSA_TOPK = 10  # Medusa's TOPK: ranks >= 10 are not representable in its tree_indices
PUBLISHED_TREES_FILE = Path(__file__).with_name("published_trees.json")


@lru_cache(maxsize=1)
def published_trees() -> dict[str, tuple[tuple[int, ...], ...]]:
    """The vendored published trees by name (`published_trees.json`)."""
    trees = json.loads(PUBLISHED_TREES_FILE.read_text())["trees"]
    return {name: tuple(tuple(p) for p in paths) for name, paths in trees.items()}


def published_tree(name: str) -> list[tuple[int, ...]]:
    """The choices of a published tree (`mc_sim_7b_63`, `single`); a KeyError names the known ones."""
    trees = published_trees()
    if name not in trees:
        raise KeyError(f"no published tree {name!r} (known: {', '.join(sorted(trees))})")
    return list(trees[name])

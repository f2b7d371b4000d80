"""Trees by name and the topology bank (paper 5 §1, §4 "Cost"; entmtp `TopologyBank`).

A tree is named by an id: a published tree (`mc_sim_7b_63`), or a searched one, `frontier_{idx:04d}_n{n}_d{D}`
(idx = its order of selection, n = its nodes besides the root, D = the search's depth cap, as the public code
names them). A bank is a JSON file (`bank.json`, written by `throughput.write_bank`) holding trees as Medusa
choices plus the scheduler's settings; `TopologyBank` builds every tree's buffers once, so switching trees
during decoding is a dictionary lookup (the tree core also caches each tree's chunk layout: `decoding.tree.buffers`).

`bank.json`: `trees` {id: {paths, n_nodes, depth, ...}}, `order` (ids by nodes, depth, id: the ladder's order),
`best` (EntMTP*, the throughput-optimal tree), `conservative` / `aggressive` (EntMTPτ's S and B), `tau_on`,
`tau_off`, `score_feature`, `thresholds` (the ladder's), and the provenance of each choice.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...decoding.tree import published_tree, published_trees
from ...io import InputError

if TYPE_CHECKING:
    from ...decoding.tree import TreeBuffers

Paths = tuple[tuple[int, ...], ...]
ROOT_ONLY = "root_only"  # the tree of no drafts: a plain greedy step (the frontier's `include_greedy`)


def canonical(paths: Sequence[Sequence[int]]) -> Paths:
    """A tree's choices sorted by (length, lexicographic): one spelling per tree."""
    return tuple(sorted((tuple(int(c) for c in p) for p in paths), key=lambda p: (len(p), p)))


def frontier_id(idx: int, n_nodes: int, depth_cap: int) -> str:
    return f"frontier_{idx:04d}_n{n_nodes}_d{depth_cap}"


def resolve_tree(tree: str | Sequence[Sequence[int]]) -> Paths:
    """A published tree by name, or a list of paths, as canonical choices."""
    if isinstance(tree, str):
        try:
            return canonical(published_tree(tree))
        except KeyError as e:
            raise InputError(str(e).strip("'\"")) from None
    return canonical(tree)


def tree_depth(paths: Paths) -> int:
    return max((len(p) for p in paths), default=0)


@dataclass(frozen=True)
class BankTree:
    id: str
    paths: Paths
    buffers: TreeBuffers

    @property
    def n_nodes(self) -> int:
        return len(self.paths)

    @property
    def depth(self) -> int:
        return tree_depth(self.paths)


class TopologyBank:
    """Trees by id with their buffers built once, in bank order (nodes, depth, id), and the bank's settings."""

    def __init__(self, trees: Mapping[str, Sequence[Sequence[int]]], settings: Mapping[str, Any] | None = None):
        if not trees:
            raise ValueError("a topology bank needs at least one tree")
        from ...decoding.tree import tree_buffers  # torch: imported by the jobs that build a bank, not by the tables

        built = [BankTree(i, canonical(p), tree_buffers(canonical(p))) for i, p in trees.items()]
        self.trees = {t.id: t for t in sorted(built, key=lambda t: (t.n_nodes, t.depth, t.id))}
        self.settings = dict(settings or {})

    @property
    def order(self) -> list[str]:
        return list(self.trees)

    def __getitem__(self, tree_id: str) -> BankTree:
        if tree_id not in self.trees:
            raise KeyError(f"tree {tree_id!r} is not in the bank ({', '.join(self.trees)})")
        return self.trees[tree_id]

    @property
    def max_depth(self) -> int:
        return max(t.depth for t in self.trees.values())

    @classmethod
    def read(cls, path: str | os.PathLike) -> TopologyBank:
        """A bank file (module docstring); a missing file or tree list names the file."""
        p = Path(path)
        if not p.is_file():
            raise InputError(f"{p}: no bank file (written by the p5 throughput stage)")
        data = json.loads(p.read_text())
        if not isinstance(data.get("trees"), dict) or not data["trees"]:
            raise InputError(f"{p}: field 'trees' must name at least one tree")
        trees = {i: t["paths"] for i, t in data["trees"].items()}
        return cls(trees, {k: v for k, v in data.items() if k != "trees"})

    @classmethod
    def of(cls, spec: str | os.PathLike | Mapping[str, Any] | TopologyBank) -> TopologyBank:
        """A bank from a file path, a dict in the file's layout, or a bank."""
        if isinstance(spec, TopologyBank):
            return spec
        if isinstance(spec, Mapping):
            trees = {i: (t["paths"] if isinstance(t, Mapping) else t) for i, t in spec["trees"].items()}
            return cls(trees, {k: v for k, v in spec.items() if k != "trees"})
        return cls.read(spec)


def published_names() -> list[str]:
    return sorted(published_trees())

"""Tree decoding, the shared core of the drafters of papers 2, 3 and 5 and of the n-gram baselines: a draft tree
is laid out (`buffers`: masks, positions, the indices of Medusa's buffers; `published`: Medusa's and Hydra's
published trees, read without torch), verified in one forward and committed (`verify`, with the generic
draft-verify-accept `TreeDecoder`), accepted by a rule (`accept`: greedy, typical), and carried between steps
(`state`).

The names below load their module on first use (PEP 562), so that a plan check reading the published trees
imports no torch.
"""

from ...io import lazy_exports

_WHERE = {
    **dict.fromkeys(
        [
            "DepthLevel",
            "TreeBuffers",
            "ancestor_mask",
            "candidates_from_topk",
            "chain_buffers",
            "chunk_attention_mask",
            "hydra_extras",
            "tree_buffers",
            "tree_buffers_from_parents",
        ],
        "buffers",
    ),  # fmt: skip
    **dict.fromkeys(["MEDUSA_TOPK", "PUBLISHED_TREES_FILE", "published_tree", "published_trees"], "published"),
    **dict.fromkeys(["accepted_nodes", "greedy_accept", "node_ok", "typical_accept"], "accept"),
    **dict.fromkeys(["Draft", "TreeContext", "TreeState", "TreeVerifyResult"], "state"),
    **dict.fromkeys(
        [
            "ACCEPTANCE",
            "TreeDecoder",
            "attn_is_eager",
            "commit_accepted",
            "gather_cache_slots",
            "tree_forward",
            "verify_tree",
        ],
        "verify",
    ),  # fmt: skip
}
__all__ = sorted(_WHERE)
__getattr__ = lazy_exports(__name__, _WHERE)

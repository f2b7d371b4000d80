"""Paper 3's settings, importing no torch, which the workflow's plan checks read: the mask-embedding strategies
(`mask_embeddings` computes them, `probing` applies them)."""

STRATEGIES = ("last_n", "gaussian", "prompt_mean", "vocab_mean")

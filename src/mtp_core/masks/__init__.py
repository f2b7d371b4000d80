"""Attention masks and position ids: P1 blocked regions, P4 cyclical masks, tree masks (pure functions)."""

"""KV cache: block bookkeeping (blocks) and the two-tier tensor store (store)."""

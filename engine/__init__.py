"""Beamwise engine: step-wise beam search with a verifier over an offloaded KV cache."""

"""Generator backends that run outside this process: an OpenAI-compatible completions server (openai.py)."""

"""Benchmarks behind BENCHMARKS.md and the fake engine stream they share with the tests; not shipped."""

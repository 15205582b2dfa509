"""Benchmarks that print tables (each command: docs/benchmarks.md). Not imported by the library.

Layer 15 (bench): entry points of their own; may import every layer, nothing imports them.
"""

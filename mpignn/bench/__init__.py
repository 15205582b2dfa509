"""Benchmarks that print tables: `python -m mpignn.bench` (scaling), `mpignn.bench.sampler`,
`mpignn.bench.epoch` (single-process epoch against PyG). Not imported by the library.

Layer 15 (bench): entry points of their own; may import every layer, nothing imports them.
"""

"""Benchmarks that print tables: `python -m mpignn.bench` (scaling), `mpignn.bench.sampler`,
`mpignn.bench.epoch` (single-process epoch against PyG). Not imported by the library."""

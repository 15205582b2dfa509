"""Neighbour sampling: compiled kernels, the multi-hop sampler, and its distributed hop source.
Index arrays only; no torch-geometric."""
from mpignn.sampling.neighbor import HopSource, LocalHops, NeighborSampler, SampleOutput, parse_fanout

__all__ = ["HopSource", "LocalHops", "NeighborSampler", "SampleOutput", "parse_fanout"]

"""Neighbour sampling: compiled kernels, the multi-hop sampler, and its distributed hop source. Index arrays only.

Layer 6 (sampling): imports partition and the layers below; never exchange, loader or anything above.
"""
from mpignn.sampling.neighbor import HopSource, LocalHops, NeighborSampler, SampleOutput

__all__ = ["HopSource", "LocalHops", "NeighborSampler", "SampleOutput"]

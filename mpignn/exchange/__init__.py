"""Remote node data: features and labels of sampled nodes, fetched from their owners, with a hot-node cache.

Layer 7 (exchange): imports sampling and the layers below; never loader, models or anything above.
"""
from mpignn.exchange.features import FeatureStore

__all__ = ["FeatureStore"]

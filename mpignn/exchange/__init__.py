"""Remote node data: features and labels of sampled nodes, fetched from their owners, with a hot-node cache.
No torch-geometric."""
from mpignn.exchange.features import FeatureStore

__all__ = ["FeatureStore"]

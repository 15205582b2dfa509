"""Seeds -> sample -> exchange -> PyG batch: `LocalGraph`, `BatchLoader`, `HeteroData` batches, prefetch policy.

Layer 8 (loader): imports the layers below (launch, data, partition, sampling, exchange); never models, tasks or
training. The first layer that imports torch-geometric (in `batches`).
"""

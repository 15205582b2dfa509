"""Seeds -> sample -> exchange -> PyG batch: `LocalGraph` (one rank's part with its sampler and feature store),
`BatchLoader` (`Data` mini-batches), heterogeneous batches (`HeteroData`) and the prefetch policy.

Layer 8 (loader): imports the layers below (launch, data, partition, sampling, exchange); never models, tasks or
training. The first layer that imports torch-geometric (in `batches`).
"""

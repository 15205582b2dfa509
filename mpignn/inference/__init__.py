"""Exact layer-wise inference: every layer over whole neighbourhoods, block by block, each rank its own nodes
(`layerwise`), what each layer computes on a block (`layers`: mpignn's models, PyG's basic GNNs, `.convs`
modules), and the blocks and halo rows it runs on (`blocks`, numpy only).

Layer 10 (inference): imports models and the layers below; never tasks, training, runtime or predict.
"""

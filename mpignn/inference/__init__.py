"""Exact layer-wise inference: every layer over whole neighbourhoods, block by block, each rank its own nodes.

Layer 10 (inference): imports models and the layers below; never tasks, training, runtime or predict.
"""

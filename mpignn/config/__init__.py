"""Configuration: every flag of `python -m mpignn.train` (`TrainConfig`, its graph section `GraphOptions`), the
allowed values and ranges, and every refused combination.

Layer 1 (config): stdlib only; imports nothing of mpignn but the leaves (errors). Never torch, numpy or MPI.
"""

"""Configuration: `TrainConfig` (every flag of `python -m mpignn.train`, its parser and its checks), the allowed
values of every choice flag (`choices`), and `GraphOptions` (what building one rank's graph needs).

Layer 1 (config): stdlib only; imports nothing of mpignn but the leaves (errors). Never torch, numpy or MPI.
"""

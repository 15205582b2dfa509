"""Configuration: `TrainConfig` (every flag of `python -m mpignn.train`, its parser), whose graph section
`GraphOptions` is what building one rank's graph needs; the allowed values of every choice flag (`choices`),
each field's range beside it (`values.opt`), and every refused combination (`refusals`).

Layer 1 (config): stdlib only; imports nothing of mpignn but the leaves (errors). Never torch, numpy or MPI.
"""

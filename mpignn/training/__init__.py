"""Training: one epoch (`epoch`), the epoch loop with evaluation, checkpoints and stopping (`fit`), DDP, the
learning-rate schedule, the epoch record (`record`) and its report, TensorBoard scalars,
`--minibatch auto` (counted) and `tune` (timed).

Layer 12 (training): imports tasks and every layer below; never runtime, predict or bench.
"""

"""Training: one epoch, the epoch loop with evaluation, checkpoints and stopping, DDP, the learning-rate schedule,
the epoch record and its reports, and `--minibatch auto`/`tune`.

Layer 12 (training): imports tasks and every layer below; never runtime, predict or bench.
"""

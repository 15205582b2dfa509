"""`parse(argv)`: the TrainConfig `python -m mpignn.train ARGV` runs with (defaults < --config < flags)."""
from __future__ import annotations

from typing import Sequence

from mpignn.config.train_config import TrainConfig, build_parser


def parse(argv: Sequence[str] | None = None) -> TrainConfig:
    return TrainConfig.from_args(build_parser().parse_args(argv))

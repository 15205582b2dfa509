"""Rank-aware logging: rank 0 at INFO, the others at WARNING, every line tagged with rank and host. Stdlib only.

Only `setup_logging` attaches handlers, and only `main` calls it. MPIGNN_LOG_RANKS (`all` or `0,3`) and
MPIGNN_LOG_LEVEL widen or change that.
"""
from __future__ import annotations

import logging
import os
import socket
import sys

__all__ = ["setup_logging"]


def setup_logging(rank: int, world_size: int, host: str | None = None) -> None:
    """Send the `mpignn` loggers to stderr with a `[rank/size host]` tag; rank 0 (or MPIGNN_LOG_RANKS) at
    INFO (or MPIGNN_LOG_LEVEL), the other ranks at WARNING."""
    spec = os.environ.get("MPIGNN_LOG_RANKS", "").strip().lower() or "0"
    shown = set(range(world_size)) if spec == "all" else {int(r) for r in spec.split(",") if r.strip()}
    level = os.environ.get("MPIGNN_LOG_LEVEL", "INFO").upper()
    logger = logging.getLogger("mpignn")
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    tag = f"r{rank}/{world_size} {host or socket.gethostname()}".replace("%", "%%")  # a fixed part of the format
    handler.setFormatter(logging.Formatter(f"%(asctime)s [{tag}] %(levelname)s %(name)s: %(message)s",
                                           datefmt="%H:%M:%S"))
    logger.addHandler(handler)
    logger.setLevel(level if rank in shown else logging.WARNING)
    logger.propagate = False

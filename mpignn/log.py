"""Rank-aware logging: rank 0 at INFO, the others at WARNING, every line tagged with rank and host.

Only `setup_logging` attaches handlers, and only `main` calls it. MPIGNN_LOG_RANKS (`all` or `0,3`) and
MPIGNN_LOG_LEVEL widen or change that.
"""
from __future__ import annotations

import logging
import os
import socket
import sys

from mpignn.errors import ConfigError

__all__ = ["setup_logging"]


def setup_logging(rank: int, world_size: int, host: str | None = None) -> None:
    """Send the `mpignn` loggers to stderr with a `[rank/size host]` tag; rank 0 (or MPIGNN_LOG_RANKS) at
    INFO (or MPIGNN_LOG_LEVEL), the other ranks at WARNING. A bad MPIGNN_LOG_RANKS or MPIGNN_LOG_LEVEL is a
    ConfigError on every rank alike.
    """
    raw = os.environ.get("MPIGNN_LOG_RANKS", "")
    spec = raw.strip().lower() or "0"
    try:
        shown = set(range(world_size)) if spec == "all" else {int(r) for r in spec.split(",") if r.strip()}
    except ValueError:
        raise ConfigError(f"MPIGNN_LOG_RANKS={raw!r} names no ranks. HINT: all, or rank numbers separated by "
                          "commas (e.g. 0,3); unset it for rank 0 only") from None
    raw = os.environ.get("MPIGNN_LOG_LEVEL", "INFO")
    level = raw.strip().upper() or "INFO"
    if not isinstance(logging.getLevelName(level), int):  # a known name gives its number
        raise ConfigError(f"MPIGNN_LOG_LEVEL={raw!r} names no log level. HINT: DEBUG, INFO, WARNING, ERROR or "
                          "CRITICAL (any case); unset it for INFO")
    logger = logging.getLogger("mpignn")
    logger.handlers.clear()
    handler = logging.StreamHandler(sys.stderr)
    tag = f"r{rank}/{world_size} {host or socket.gethostname()}".replace("%", "%%")  # a fixed part of the format
    handler.setFormatter(logging.Formatter(f"%(asctime)s [{tag}] %(levelname)s %(name)s: %(message)s",
                                           datefmt="%H:%M:%S"))
    logger.addHandler(handler)
    logger.setLevel(level if rank in shown else logging.WARNING)
    logger.propagate = False

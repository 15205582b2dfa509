"""Graph learning tasks as data: each is a `Task` the one pipeline asks what differs. The registry is
`config.choices.TASKS`, so config checks `--task` without torch; `make_task` imports the one asked for.

Layer 11 (tasks): imports inference, models and the layers below; never training, runtime or anything above.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from mpignn.config.choices import TASKS, check_choice
from mpignn.tasks.base import Task, picker

if TYPE_CHECKING:
    from mpignn.config.train_config import TrainConfig

__all__ = ["Task", "make_task", "picker"]


def make_task(cfg: TrainConfig | None = None, name: str = "node") -> Task:
    """Return the task of `cfg` (with its flags), or the task `name` with its defaults; ConfigError if unknown."""
    module, _, cls = TASKS[check_choice("task", name if cfg is None else cfg.task, tuple(TASKS))].partition(":")
    task: type[Task] = getattr(importlib.import_module(module), cls)
    return task() if cfg is None else task.from_config(cfg)

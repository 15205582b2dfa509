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

__all__ = ["Task", "make_task", "task_class", "picker"]


def task_class(name: str) -> type[Task]:
    """Return the `Task` subclass registered as `name`.

    Raises:
        ConfigError: an unknown name.
    """
    module, _, cls = TASKS[check_choice("task", name, tuple(TASKS))].partition(":")
    return getattr(importlib.import_module(module), cls)


def make_task(cfg: TrainConfig | None = None, name: str = "node") -> Task:
    """Return the task of `cfg` (with its flags), or the task `name` with its defaults."""
    if cfg is None:
        return task_class(name)()
    return task_class(cfg.task).from_config(cfg)

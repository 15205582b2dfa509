"""Tasks are data: the registry, a pipeline that names no task, and a new task added as one module plus one
registry line, trained end to end by `python -m mpignn.train` without touching anything else."""
from __future__ import annotations

import ast
import json
import textwrap
from pathlib import Path

import pytest

from mpignn.config.choices import TASKS
from mpignn.errors import ConfigError
from mpignn.tasks import Task, make_task

PACKAGE = Path(__file__).resolve().parent.parent / "mpignn"
SMALL = "synthetic:num_nodes=600,avg_degree=6,num_features=8,num_classes=4"
# the modules that run every task: they ask the Task and may not decide by its name
SHARED_BY_TASKS = ("mpignn.tasks.base",)  # what every task shares, named by none
PIPELINE = ["training", "runtime", "loader", "train.py", "config/graph_options.py", "partition", "inference",
            "bench/__main__.py", "models/__init__.py", "predict"]


def test_every_registered_task_is_made_by_name():
    for name in TASKS:
        task = make_task(name=name)
        assert isinstance(task, Task) and task.name == name and task.metric and task.unit
    with pytest.raises(ConfigError, match="--task must be one of"):
        make_task(name="graph")


def _decisions_by_task_name(path: Path) -> list[str]:
    """Comparisons with a registered task's name, and imports of a concrete task module."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Compare):
            for side in [node.left, *node.comparators]:
                if isinstance(side, ast.Constant) and side.value in TASKS:
                    found.append(f"{path.name}:{node.lineno} compares with {side.value!r}")
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("mpignn.tasks.") \
                and node.module not in SHARED_BY_TASKS:
            found.append(f"{path.name}:{node.lineno} imports {node.module}")
    return found


def test_the_pipeline_names_no_task():
    files = []
    for entry in PIPELINE:
        path = PACKAGE / entry
        files += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    found = [hit for path in files for hit in _decisions_by_task_name(path)]
    assert found == [], "ask the Task (mpignn.tasks.base) instead of testing its name"


def test_the_check_finds_a_planted_decision(tmp_path):
    planted = tmp_path / "loop.py"
    planted.write_text("def f(cfg):\n    if cfg.task == 'link':\n        from mpignn.tasks.link import LinkSeeds\n")
    assert _decisions_by_task_name(planted) == ["loop.py:2 compares with 'link'", "loop.py:3 imports mpignn.tasks.link"]


PARITY = '''
"""A task only this test knows: is a node's class even? One module, one registry line."""
import torch
import torch.nn.functional as F

from mpignn.models import build_model, forward_batch
from mpignn.mpi import allreduce_sum
from mpignn.tasks.base import Task, with_rows


class ParityTask(Task):
    name, metric, unit = "parity", "pacc", "nodes"

    def seeds(self, graph, split, pick):
        return pick(getattr(graph.part, f"{split}_idx"), 0)

    def build_model(self, name, graph, hidden, num_layers, dropout):
        return build_model(name, graph.in_channels(), hidden, 2, num_layers, dropout)

    def forward(self, model, batch):
        return forward_batch(model, batch)

    def loss(self, logits, batch, n):
        labels = batch.y[:n] % 2
        return F.cross_entropy(logits.float(), labels, reduction="sum"), logits.argmax(-1), labels

    @torch.no_grad()
    def evaluate(self, rt, model, loaders, *, now, bf16, embedding, test_if):
        if not now:
            return {"val_pacc": None, "test_pacc": None}
        module, out = getattr(model, "module", model), {}
        module.eval()
        for split in ("val", "test"):
            right = seen = 0.0
            for batch in loaders[split]:
                with_rows(batch, embedding, rt.device, train=False)
                n = batch.batch_size
                if n:
                    right += float((forward_batch(module, batch).argmax(-1) == batch.y[:n] % 2).sum())
                    seen += n
            right, seen = allreduce_sum(rt.comm, [right, seen]).tolist()
            out[f"{split}_pacc"] = right / seen if seen else None
        return out

    def describe(self, rec):
        return f"parity val {rec['val_pacc']} test {rec['test_pacc']}"
'''


def test_a_new_task_is_one_module_and_one_registry_line(tmp_path, monkeypatch):
    from mpignn import train

    (tmp_path / "parity_task.py").write_text(textwrap.dedent(PARITY))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(TASKS, "parity", "parity_task:ParityTask")  # the one registry line
    out = tmp_path / "m.jsonl"
    code = train.main(["--task", "parity", "--dataset", SMALL, "--root", str(tmp_path / "data"), "--epochs", "3",
                       "--fanout", "4,3", "--batch-size", "64", "--threads", "1", "--metrics-out", str(out)])
    assert code == 0
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    last = recs[-1]
    assert "val_acc" not in last and last["nodes_per_s"] > 0 and last["best_val_pacc"] is not None
    assert last["loss"] < recs[0]["loss"] and 0.5 < last["val_pacc"] <= 1.0, last

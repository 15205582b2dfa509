"""One source of defaults and refusals: the Python API (`GraphOptions`, `bootstrap`, `make_loader`,
`load_local_graph`, `attach_embedding`) defaults to `TrainConfig`'s values, and refuses a combination of flags in
the same words as `python -m mpignn.train` (`config.refusals`)."""
import dataclasses
import inspect
from pathlib import Path

import pytest

from _config import parse
from mpignn.config.graph_options import GraphOptions
from mpignn.config.refusals import RULES, refusal
from mpignn.config.graph_options import parse_fanout
from mpignn.config.train_config import TrainConfig
from mpignn.errors import ConfigError

def test_graph_options_are_the_training_configs_section():
    """Not a copy: TrainConfig extends GraphOptions, so each graph flag is declared, defaulted and checked once,
    under the flag's name."""
    assert issubclass(TrainConfig, GraphOptions)
    names = {f.name for f in dataclasses.fields(GraphOptions)}
    assert {"partition_method", "fanout", "edge_fanout"} <= names and not {"method", "fanouts", "links"} & names
    cli, api = TrainConfig(), GraphOptions()
    assert all(getattr(api, name) == getattr(cli, name) for name in names)
    assert api.fanouts == parse_fanout(cli.fanout) == [15, 10, 5]


def test_api_functions_default_to_the_cli_defaults():
    from mpignn.runtime import attach_embedding, bootstrap, load_local_graph
    from mpignn.training.loaders import make_loader

    cli = TrainConfig()
    renamed = {"lr": "embed_lr"}
    checked = 0
    for fn in (bootstrap, make_loader, load_local_graph, attach_embedding):
        for name, param in inspect.signature(fn).parameters.items():
            field = renamed.get(name, name) if fn is attach_embedding else name
            if param.default not in (inspect.Parameter.empty, None) and hasattr(cli, field):  # None: the graph's
                assert param.default == getattr(cli, field), f"{fn.__name__}({name}=...) differs from --{field}"
                checked += 1
    assert checked >= 11  # make_loader(minibatch=None): independent; the CLI's auto needs the model


def _graph(**over):
    from mpignn.loader.local_graph import LocalGraph
    from mpignn.tasks import make_task

    values = dict(part=None, sampler=None, features=None, replicated=False, folder=Path("."), task=make_task())
    return LocalGraph(**{**values, **over})


@pytest.mark.parametrize("argv,api", [
    (["--partitions", "p", "--replicated"], lambda: GraphOptions(partitions="p", replicated=True)),
    (["--minibatch", "cooperative", "--replicated"], lambda: _refuse_coop(_graph(replicated=True))),
    (["--embed-dim", "8", "--replicated"], lambda: _refuse({"embed_dim": 8, "replicated": True})),
])
def test_cli_and_api_refuse_alike(argv, api):
    with pytest.raises(ConfigError) as cli:
        parse(argv)
    with pytest.raises(ConfigError) as lib:
        api()
    assert str(cli.value) == str(lib.value) and "HINT:" in str(cli.value)


def _refuse_coop(graph):
    from mpignn.training.loaders import cooperative_refusal

    raise ConfigError(cooperative_refusal(graph))


def _refuse(values):
    raise ConfigError(refusal(values))


def test_cooperative_refusals_come_from_the_task_and_the_graph():
    from mpignn.loader.hetero import HeteroLayout  # noqa: F401  (any layout marks a heterogeneous graph)
    from mpignn.training.loaders import cooperative_refusal
    from mpignn.tasks import make_task
    from mpignn.training.fit import check_flags

    assert cooperative_refusal(_graph()) == ""
    assert "--task link batches are not node seeds" in cooperative_refusal(_graph(task=make_task(name="link")))
    assert "homogeneous graphs" in cooperative_refusal(_graph(layout=object()))
    with pytest.raises(ConfigError, match="--task link batches are not node seeds"):
        check_flags(parse(["--task", "link", "--minibatch", "cooperative"]), make_task(name="link"))


def test_each_rule_refuses_and_accepts():
    """Every rule fires on some values and stays quiet on others (no dead or always-on rule)."""
    samples = {"minibatch": ("cooperative", "independent"), "replicated": (True, False), "embed_dim": (8, 0),
               "task": ("link", "node"), "cooperative_task": (False, True), "hetero": (True, False),
               "partitions": ("p", ""), "evals_per_epoch": (2, 1), "eval_every": (2, 1), "resume": (True, False),
               "requeue": (True, False), "checkpoint_dir": ("", "ck"), "force_new": (True, False), "device": ("xpu", "cpu"),
               "backend": ("gloo", "auto"), "splits": ("splits.npz", ""), "model": ("rgcn", "sage"),
               "norm": ("batch", "none"), "residual": (True, False),
               "linear_head": (True, False), "sampler": ("labor", "neighbor")}
    pairs = {("batch_dependency", "sampler"): ([4, "neighbor"], [4, "labor"]),  # labor is the good sampler here
             ("layer_dependency", "sampler"): ([True, "neighbor"], [True, "labor"]),
             ("labor_iterations", "sampler"): ([3, "neighbor"], [3, "labor"]),
             ("labor_iterations", "model"): ([3, "gat"], [3, "sage"]),
             ("feature_device", "exchange"): (["host", "torch"], ["device", "mpi"])}
    for rule in RULES:
        if rule.names in pairs:
            bad, good = pairs[rule.names]
        else:
            bad, good = [samples[n][0] for n in rule.names], [samples[n][1] for n in rule.names]
        assert rule.refuses(*bad) and not rule.refuses(*good), rule.names
        assert "HINT:" in rule.message(*bad)

"""Tier 1/2: the graph is built from one frozen GraphOptions value (issue #26 item 3). train.py passes that one
value; load_local_graph(rt, dataset, root, **kwargs) builds it from its keywords; a flag is refused by one check
with one message on both paths; the choice lists have one definition; attach_embedding returns a new graph."""
from __future__ import annotations
from _config import parse

import dataclasses
import types
from pathlib import Path

import pytest

from mpignn.errors import ConfigError, is_agreed

PACKAGE = Path(__file__).resolve().parent.parent / "mpignn"
SMALL = "synthetic:num_nodes=400,avg_degree=4,num_features=4"


def test_the_config_carries_every_graph_flag_and_is_frozen():
    """TrainConfig is a GraphOptions (its graph section); made once, checked, then only read."""
    from mpignn.config.graph_options import GraphOptions

    cfg = parse(["--dataset", SMALL, "--root", "/r", "--partition-method", "random", "--seed", "7",
                 "--fanout", "4,3", "--cache-size", "123", "--local-prep", "--prep-timeout", "9", "--exchange", "mpi",
                 "--task", "link", "--link-val", "0.1", "--link-test", "0.2", "--link-tails", "5",
                 "--feature-norm", "row", "--feature-dtype", "bf16", "--force"])
    from mpignn.tasks import make_task

    assert isinstance(cfg, GraphOptions)
    assert (cfg.dataset, cfg.root, cfg.partition_method, cfg.seed, cfg.fanouts) == (SMALL, "/r", "random", 7, [4, 3])
    assert (cfg.cache_size, cfg.local_prep, cfg.prep_timeout, cfg.exchange) == (123, True, 9.0, "mpi")
    assert (cfg.feature_norm, cfg.feature_dtype, cfg.force, cfg.replicated) == ("row", "bf16", True, False)
    assert cfg.link_params(make_task(cfg).partition_extras()) == {"val": 0.1, "test": 0.2, "num_tails": 5, "seed": 7}
    assert cfg.edge_fanouts == {} and cfg.partitions == ""
    for frozen in (cfg, GraphOptions(fanout=[4, 3])):
        with pytest.raises(dataclasses.FrozenInstanceError):
            frozen.cache_size = 0  # type: ignore[misc]
    assert GraphOptions(fanout=[4, 3]).fanout == "4,3"  # canonical: ranks and checkpoints compare configs alike
    assert GraphOptions(edge_fanout={"a__to__b": [2]}, fanout="3").edge_fanout == "a__to__b=2"


@pytest.mark.parametrize("flags, keywords", [
    (["--feature-norm", "l2"], {"feature_norm": "l2"}),
    (["--feature-dtype", "int8"], {"feature_dtype": "int8"}),
    (["--exchange", "nccl"], {"exchange": "nccl"}),
    (["--cache-size", "lots"], {"cache_size": "lots"}),
    (["--partition-method", "spectral"], {"partition_method": "spectral"}),
])
def test_a_bad_graph_flag_gets_one_message_from_the_cli_and_the_api(flags, keywords):
    """One check per flag: TrainConfig and load_local_graph refuse alike (before any collective: `rt` is never
    touched), and the API's error is agreed (every rank raises it)."""
    from mpignn.runtime import load_local_graph

    with pytest.raises(ConfigError) as cli:
        parse(["--dataset", SMALL, *flags])
    with pytest.raises(ConfigError) as api:
        load_local_graph(types.SimpleNamespace(), SMALL, "data", **keywords)
    assert str(cli.value) == str(api.value)
    assert "HINT:" in str(api.value) and is_agreed(api.value)


def test_load_local_graph_refuses_an_unknown_keyword_on_every_rank():
    from mpignn.runtime import load_local_graph

    with pytest.raises(ConfigError, match="expected GraphOptions fields") as err:
        load_local_graph(types.SimpleNamespace(), SMALL, "data", cache_rows=5)
    assert is_agreed(err.value)


def test_choice_lists_have_one_definition_their_owners_use():
    from mpignn import models
    from mpignn.config import choices
    from mpignn.data import features
    from mpignn.models import hetero, link
    from mpignn.partition import assign

    assert features.FEATURE_NORMS is choices.FEATURE_NORMS and features.FEATURE_DTYPES is choices.FEATURE_DTYPES
    assert assign.METHODS is choices.PARTITION_METHODS and assign.DEFAULT_METHOD is choices.DEFAULT_METHOD
    assert models.MODELS is choices.MODELS and hetero.HETERO_MODELS is choices.HETERO_MODELS
    assert link.DECODERS is choices.DECODERS
    for flag, values in {"--feature-norm": choices.FEATURE_NORMS, "--feature-dtype": choices.FEATURE_DTYPES,
                         "--partition-method": choices.PARTITION_METHODS, "--model": choices.MODELS,
                         "--decoder": choices.DECODERS, "--exchange": choices.EXCHANGES,
                         "--prefetch": choices.PREFETCH_MODES}.items():
        for value in values:  # every value an owner takes, config takes
            parse([flag, value])


def test_flag_combinations_are_checked_where_the_flags_are_defined():
    """--requeue without --checkpoint-dir was refused by fit.check_flags, after the config had taken it; and a
    prefetch mode overlap() does not know was taken as auto."""
    from mpignn.loader.prefetch import overlap

    with pytest.raises(ConfigError, match="--requeue expects --checkpoint-dir"):
        parse(["--requeue"])
    rt = types.SimpleNamespace(choice=types.SimpleNamespace(device_type="cpu"), threads=8)
    with pytest.raises(ConfigError, match="--prefetch must be one of auto, on, off") as err:
        overlap(rt, True, "sometimes")
    assert is_agreed(err.value)


def test_train_builds_the_graph_from_its_config(monkeypatch):
    """python -m mpignn.train hands build_local_graph its config (whose graph section it reads), not loose
    fields nor a copy."""
    from mpignn import train
    from mpignn.runtime import graph

    seen = []

    class Built(Exception):
        pass

    def fake_build(rt, opts, task):
        seen.append(opts)
        raise Built

    monkeypatch.setattr(graph, "build_local_graph", fake_build)
    argv = ["--dataset", SMALL, "--fanout", "3,2", "--cache-size", "0", "--feature-norm", "row", "--threads", "1"]
    with pytest.raises(Built):
        train.main(argv)
    assert seen == [parse(argv)]


def test_attach_embedding_returns_a_new_graph_and_leaves_the_old_one(tmp_path):
    from mpignn import runtime

    rt = runtime.bootstrap(logging_setup=False)
    graph = runtime.load_local_graph(rt, SMALL, str(tmp_path), fanout=[2], cache_size=0)
    with_rows = runtime.attach_embedding(rt, graph, 8, seed=1)
    assert graph.embedding is None and with_rows.embedding is not None
    assert (graph.num_features, with_rows.num_features) == (4, 12)
    assert with_rows.graph_mib > graph.graph_mib and with_rows.part is graph.part
    with pytest.raises(dataclasses.FrozenInstanceError):
        graph.embedding = with_rows.embedding  # type: ignore[misc]


def test_no_module_is_over_400_lines():
    """One job a module: the package's modules stay small (issue 60's bound)."""
    long = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 400}
    assert long == {}, long

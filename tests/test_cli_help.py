"""`--help` renders for every command line: argparse %-formats each flag's help, taken from the config
dataclasses' docstrings, so a bare % there breaks `--help` (and only `--help`)."""
import importlib

import pytest


@pytest.mark.parametrize("module", ["mpignn.config.train_config", "mpignn.predict.cli"])
def test_help_renders(module):
    assert "--" in importlib.import_module(module).build_parser().format_help()

"""`--help` says what each flag does and why its default, briefly: no flag's help quotes a measured figure (a
ratio such as 1.7x, a percentage, an accuracy difference in points, a fractional timing: those go stale and
live in docs/benchmarks.md "Figures behind the defaults"), and each TrainConfig field docstring, the train
flags' help, fits two lines of ~100 characters. In-process: the parsers are only built, nothing runs."""
from __future__ import annotations

import argparse
import importlib
import re

import pytest

from mpignn.config.train_config import field_docs

# A measured figure: a ratio (1.7x, 0.51x; not a config name such as 1x1 or 2x1@0), a percentage (66-81%,
# 10 percent), an accuracy difference (0.44 point, 8 points), a fractional timing (0.14 s, 7.12 ms). Settings
# stay allowed: "256 MiB", "300 s", "(default: 0.7)".
MEASURED = re.compile(r"""
      \d[x×](?!\w)                                        # ratio
    | \d\s?(?:%|percent\b)                                # percentage
    | \d\s?points?\b                                      # difference in accuracy points
    | \d\.\d+\s?(?:s|ms|us|sec|secs|seconds|min|minutes)\b  # measured (fractional) time
""", re.X | re.I)

MAX_DOC = 200  # two lines of ~100 characters; the "(default: ...)" suffix comes on top

# modules whose parser is built by build_parser(); the bench modules and info build theirs inside main()
BUILD_PARSER = ["mpignn.config.train_config", "mpignn.partition.cli", "mpignn.predict.cli"]
MAIN_PARSER = ["mpignn.info", "mpignn.bench.__main__", "mpignn.bench.epoch", "mpignn.bench.floor",
               "mpignn.bench.hetero", "mpignn.bench.memory", "mpignn.bench.predict",
               "mpignn.bench.sampler", "mpignn.bench.soak",
               "mpignn.bench.fullgraph"]


class _Built(Exception):
    """Raised in place of parsing, carrying the parser main() built."""

    def __init__(self, parser: argparse.ArgumentParser) -> None:
        super().__init__(parser.prog)
        self.parser = parser


def _parser(module: str, monkeypatch: pytest.MonkeyPatch) -> argparse.ArgumentParser:
    mod = importlib.import_module(module)
    if module in BUILD_PARSER:
        return mod.build_parser()

    def capture(self: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        raise _Built(self)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", capture)
    with pytest.raises(_Built) as built:
        mod.main([])
    return built.value.parser


def _helps(parser: argparse.ArgumentParser) -> dict[str, str]:
    return {"/".join(a.option_strings) or a.dest: a.help for a in parser._actions
            if a.help and a.help != argparse.SUPPRESS}


@pytest.mark.parametrize("planted, measured", [
    ("bf16 (autocast: 1.7x faster epochs on CPUs with bf16 matrix units)", True),
    ("in 0.51x the per-rank batch's time on the default graph, 0.86x on a community graph", True),
    ("validation ends 0.12-0.13 point below its best (8 points without dropout)", True),
    ("dropout made a CPU epoch 66-81% slower", True),
    ("cooperatively only where that was at least 10 percent faster", True),
    ("It costs 0.14-0.15 s of start-up", True),
    ("Remote rows a rank holds at once (MiB) (default: 256)", False),
    ("Seconds any collective may wait, e.g. 30 s (default: 300.0)", False),
    ("RANKSxTHREADS[@MIB], e.g. 1x1,2x1@0; fp16 or bf16; 2 ranks x 1 thread", False),
    ("Dropout after each hidden layer (0: off). 0.7: without it the graph overfits (default: 0.7)", False),
])
def test_the_pattern_tells_measured_figures_from_settings(planted, measured):
    assert bool(MEASURED.search(planted)) is measured, planted


@pytest.mark.parametrize("module", BUILD_PARSER + MAIN_PARSER)
def test_no_flag_help_quotes_a_measured_figure(module, monkeypatch):
    parser = _parser(module, monkeypatch)
    found = {flag: MEASURED.search(text).group(0) for flag, text in _helps(parser).items()
             if MEASURED.search(text)}
    assert not found, (f"{parser.prog}: measured figures in --help {found}. HINT: move them to docs/benchmarks.md "
                       '"Figures behind the defaults" and point there')
    parser.format_help()  # and it still renders


def test_parsers_found_have_flags(monkeypatch):
    assert len(_helps(_parser("mpignn.config.train_config", monkeypatch))) > 40
    assert "--configs" in _helps(_parser("mpignn.bench.__main__", monkeypatch))


def test_every_train_field_docstring_fits_two_lines():
    docs = field_docs()
    assert len(docs) > 40
    long = {name: len(text) for name, text in docs.items() if len(text) > MAX_DOC}
    assert not long, f"TrainConfig field docstrings over {MAX_DOC} characters: {long}. HINT: details go to docs/"

"""The layering rules of STYLE.md §2: leaf modules import without torch (fresh interpreters), and the static
import graph of mpignn/ (every `import` at any nesting level, read with `ast`) has no cycles, no import of a
higher layer and no `_private` name taken from another module."""
from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "mpignn"

# The layer order lives in the packages: each package's `__init__` docstring has a line `Layer N (name): ...`
# (lowest first; a module may import its own layer or below, a cycle is still refused). Directly under mpignn/
# only these leaves (stdlib-only helpers every layer uses) and entry points may sit; a package's `cli` and
# `__main__` modules are entry points too (the partition CLI asks a task what to hold out).
TOP_LEAVES = ("mpignn", "mpignn.errors", "mpignn.env", "mpignn.log", "mpignn.fileio", "mpignn.compiled")
TOP_ENTRIES = ("mpignn.train", "mpignn.info")
ENTRY_NAMES = ("cli", "__main__")
LAYER_LINE = re.compile(r"^Layer (\d+) \((\w+)\):", re.M)


def read_layers(root: Path) -> list[tuple[str, ...]]:
    """The layer list, lowest first, read from the packages under `root`: the top-level leaves, then each
    package at the layer its `__init__` docstring names, then the entry points. Raises AssertionError for a
    package whose docstring names no layer, or whose line names another package."""
    numbered: dict[int, list[str]] = {}
    entries = list(TOP_ENTRIES)
    for init in sorted(root.glob("*/__init__.py")):
        name = init.parent.name
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        found = LAYER_LINE.search(doc)
        assert found, f"mpignn/{name}/__init__.py: its docstring needs a line 'Layer N ({name}): ...'"
        assert found.group(2) == name, f"mpignn/{name}/__init__.py names layer '{found.group(2)}'"
        numbered.setdefault(int(found.group(1)), []).append(f"mpignn.{name}")
        entries += [f"mpignn.{name}.{p.stem}" for p in sorted(init.parent.glob("*.py")) if p.stem in ENTRY_NAMES]
    return [TOP_LEAVES, *(tuple(numbered[k]) for k in sorted(numbered)), tuple(entries)]


LAYERS: list[tuple[str, ...]] = read_layers(PACKAGE)


@dataclass(frozen=True)
class Import:
    """One import statement of an mpignn module, resolved to the mpignn module it loads."""

    importer: str
    target: str
    names: tuple[str, ...]
    line: int


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def read_imports(root: Path) -> tuple[set[str], list[Import]]:
    """(every module under `root`, every import of one of them), at any nesting level (function bodies too)."""
    files = {module_name(p, root): p for p in sorted(root.rglob("*.py"))}
    found = []
    for mod, path in files.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found += [Import(mod, a.name, (), node.lineno) for a in node.names if a.name in files]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    stem = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join(stem + ([node.module] if node.module else []))
                if base not in files:
                    continue
                names = tuple(a.name for a in node.names)
                subs = [n for n in names if f"{base}.{n}" in files]  # `from pkg import module`
                found += [Import(mod, f"{base}.{n}", (), node.lineno) for n in subs]
                rest = tuple(n for n in names if n not in subs)
                if rest or not subs:
                    found.append(Import(mod, base, rest, node.lineno))
    return set(files), found


def graph_of(imports: list[Import]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for imp in imports:
        if imp.target != imp.importer:
            graph.setdefault(imp.importer, set()).add(imp.target)
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    nodes = set(graph) | {w for ws in graph.values() for w in ws}
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return sorted(cycles)


def layer_of(module: str, layers: list[tuple[str, ...]]) -> int | None:
    """Index of the layer whose entry is `module` or its closest enclosing package (the root package itself
    is only its own entry, not a catch-all)."""
    parts = module.split(".")
    for k in range(len(parts), 0, -1):
        name = ".".join(parts[:k])
        if k == 1 and name != module:
            break
        for i, layer in enumerate(layers):
            if name in layer:
                return i
    return None


def unplaced(modules: set[str], layers: list[tuple[str, ...]]) -> list[str]:
    stale = [e for layer in layers for e in layer if e not in modules]
    return sorted(m for m in modules if layer_of(m, layers) is None) + [f"{e} (no such module)" for e in stale]


def upward_imports(graph: dict[str, set[str]], layers: list[tuple[str, ...]]) -> list[str]:
    out = []
    for importer, targets in sorted(graph.items()):
        for target in sorted(targets):
            low, high = layer_of(importer, layers), layer_of(target, layers)
            if low is not None and high is not None and high > low:
                out.append(f"{importer} (layer {low}) imports {target} (layer {high})")
    return out


def _private_module(target: str, importer: str) -> bool:
    """`target` has a `_name` component and `importer` is outside the package that holds it."""
    parts = target.split(".")
    for k, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            holder = ".".join(parts[:k])
            return importer != holder and not importer.startswith(holder + ".")
    return False


def private_imports(imports: list[Import]) -> list[str]:
    out = []
    for imp in imports:
        private = [n for n in imp.names if n.startswith("_") and not n.startswith("__")]
        if private:
            out.append(f"{imp.importer}:{imp.line} imports {', '.join(private)} from {imp.target}")
        if _private_module(imp.target, imp.importer):
            out.append(f"{imp.importer}:{imp.line} imports the private module {imp.target}")
    return out

# mpi, env, log, config: stdlib (+ mpi4py/numpy for mpi); data .. exchange: numpy/numba/pymetis, no torch.
NO_TORCH = ["mpignn", "mpignn.mpi", "mpignn.env", "mpignn.compiled", "mpignn.log", "mpignn.config",
            "mpignn.config.train_config", "mpignn.config.choices", "mpignn.config.graph_options", "mpignn.errors",
            "mpignn.fileio", "mpignn.data", "mpignn.partition", "mpignn.partition.source", "mpignn.sampling",
            "mpignn.sampling.access", "mpignn.sampling.cooperative", "mpignn.sampling.distributed",
            "mpignn.exchange", "mpignn.mpi.watchdog", "mpignn.info", "mpignn.launch", "mpignn.launch.allocator",
            "mpignn.launch.rendezvous", "mpignn.loader", "mpignn.loader.prefetch", "mpignn.inference",
            "mpignn.inference.blocks", "mpignn.training", "mpignn.training.tensorboard", "mpignn.predict"]
NO_PYG = ["mpignn.launch.process_group", "mpignn.launch.mpi_store", "mpignn.launch.device",
          "mpignn.launch.bootstrap", "mpignn.training.checkpoint", "mpignn.exchange.halo",
          "mpignn.exchange.embedding", "mpignn.sampling.device_hops"]


# One fresh interpreter for every module: it imports numpy (allowed everywhere) once, then forks a child per
# module that imports it and reports what it loaded, so each module still starts from an interpreter that holds
# no torch, torch-geometric or mpi4py.MPI, without paying an interpreter start and numpy's import each.
_FORKED = """
import json, os, sys
import numpy
for module in sys.argv[1:]:
    read, write = os.pipe()
    if os.fork() == 0:
        os.close(read)
        try:
            __import__(module)
            found = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'torch_geometric', 'mpi4py'))
            os.write(write, json.dumps(found).encode())
        except BaseException as exc:
            os.write(write, json.dumps(repr(exc)).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        print(json.dumps([module, json.loads(pipe.read())]))
    os.wait()
"""


@pytest.fixture(scope="module")
def loaded() -> dict[str, object]:
    """{module: the torch / torch_geometric / mpi4py modules that importing it in a fresh interpreter loaded
    (a str: the import's exception)}, for every module of NO_TORCH and NO_PYG."""
    out = subprocess.run([sys.executable, "-c", _FORKED, *NO_TORCH, *NO_PYG], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    return dict(json.loads(line) for line in out.stdout.splitlines())


def _loaded(found: dict[str, object], module: str) -> set[str]:
    assert not isinstance(found[module], str), f"import {module} failed: {found[module]}"
    return set(found[module])


@pytest.mark.parametrize("module", NO_TORCH)
def test_leaf_modules_import_without_torch(loaded, module):
    found = _loaded(loaded, module)
    assert "torch" not in found and "torch_geometric" not in found
    assert "mpi4py.MPI" not in found, "importing must not initialise MPI"


@pytest.mark.parametrize("module", NO_PYG)
def test_lower_layers_import_without_torch_geometric(loaded, module):
    assert "torch_geometric" not in _loaded(loaded, module)


def test_star_import_of_mpi_stays_free_of_torch():
    # mpignn.mpi does not reach up into mpignn.launch: the torch helpers live in mpignn.launch.process_group.
    code = ("from mpignn.mpi import *; import sys, mpignn.mpi as m; "
            "print(' '.join(sorted(x for x in sys.modules if x.split('.')[0] == 'torch'))); "
            "print(hasattr(m, 'init_process_group'), 'mpignn.launch.process_group' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    first, second = out.stdout.split("\n")[:2]
    assert first == "", "`from mpignn.mpi import *` imported torch"
    assert second == "False False", "mpignn.mpi must not import or re-export mpignn.launch.process_group"


# --- the static import graph ---------------------------------------------------------------------------------

def test_planted_cycle_is_found():
    graph = {"mpignn.a": {"mpignn.b"}, "mpignn.b": {"mpignn.c"}, "mpignn.c": {"mpignn.a"}, "mpignn.d": {"mpignn.a"}}
    assert find_cycles(graph) == [["mpignn.a", "mpignn.b", "mpignn.c"]]
    del graph["mpignn.c"]
    assert find_cycles(graph) == []


def test_planted_upward_import_is_found():
    layers = [("mpignn.low",), ("mpignn.pkg",), ("mpignn.high",)]
    graph = {"mpignn.high": {"mpignn.pkg.sub", "mpignn.low"}, "mpignn.pkg.sub": {"mpignn.low", "mpignn.pkg"}}
    assert upward_imports(graph, layers) == []
    graph["mpignn.low"] = {"mpignn.pkg.sub"}
    assert upward_imports(graph, layers) == ["mpignn.low (layer 0) imports mpignn.pkg.sub (layer 1)"]
    assert unplaced({"mpignn.low", "mpignn.pkg", "mpignn.pkg.sub", "mpignn.new"}, layers) == [
        "mpignn.new", "mpignn.high (no such module)"]


def test_planted_tree_lazy_relative_and_private_imports_are_read(tmp_path):
    pkg = tmp_path / "mpignn"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "low.py").write_text("def f():\n    if True:\n        from mpignn.sub import high\n")
    (pkg / "sub" / "__init__.py").write_text("from . import _impl\n")
    (pkg / "sub" / "_impl.py").write_text("_HIDDEN = 1\n")
    (pkg / "sub" / "high.py").write_text("import mpignn.low\nfrom ._impl import _HIDDEN\n")
    (pkg / "other.py").write_text("class C:\n    def m(self):\n        from mpignn.sub._impl import _HIDDEN\n")
    modules, imports = read_imports(pkg)
    assert modules == {"mpignn", "mpignn.low", "mpignn.sub", "mpignn.sub._impl", "mpignn.sub.high", "mpignn.other"}
    graph = graph_of(imports)
    assert graph["mpignn.low"] == {"mpignn.sub.high"}  # lazy, inside a function
    assert graph["mpignn.sub.high"] == {"mpignn.low", "mpignn.sub._impl"}
    assert find_cycles(graph) == [["mpignn.low", "mpignn.sub.high"]]
    layers = [("mpignn", "mpignn.low"), ("mpignn.sub", "mpignn.other")]
    assert upward_imports(graph, layers) == ["mpignn.low (layer 0) imports mpignn.sub.high (layer 1)"]
    assert private_imports(imports) == [
        "mpignn.other:3 imports _HIDDEN from mpignn.sub._impl",
        "mpignn.other:3 imports the private module mpignn.sub._impl",
        "mpignn.sub.high:2 imports _HIDDEN from mpignn.sub._impl"]


def test_layers_are_read_from_the_packages(tmp_path):
    pkg = tmp_path / "mpignn"
    for name, line in (("low", "Layer 1 (low): x"), ("high", "Layer 2 (high): y"), ("twin", "Layer 1 (twin): z")):
        (pkg / name).mkdir(parents=True)
        (pkg / name / "__init__.py").write_text(f'"""What it owns.\n\n{line}\n"""\n')
    (pkg / "high" / "cli.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "stray.py").write_text("")
    layers = read_layers(pkg)
    assert layers[1:] == [("mpignn.low", "mpignn.twin"), ("mpignn.high",), (*TOP_ENTRIES, "mpignn.high.cli")]
    modules, _ = read_imports(pkg)
    assert unplaced(modules, layers)[:1] == ["mpignn.stray"]  # a new top-level module must be allow-listed
    (pkg / "bare").mkdir()
    (pkg / "bare" / "__init__.py").write_text('"""No layer line."""\n')
    with pytest.raises(AssertionError, match="needs a line 'Layer N \\(bare\\)"):
        read_layers(pkg)


def test_top_level_holds_only_leaves_and_entry_points():
    top = sorted(p.stem for p in PACKAGE.glob("*.py"))
    assert len(top) <= 8, top
    assert {f"mpignn.{s}" if s != "__init__" else "mpignn" for s in top} == {*TOP_LEAVES, *TOP_ENTRIES}


@pytest.fixture(scope="module")
def real_tree() -> tuple[set[str], list[Import]]:
    return read_imports(PACKAGE)


def test_every_module_has_a_layer(real_tree):
    modules, _ = real_tree
    assert len(modules) > 50
    assert unplaced(modules, LAYERS) == [], "place the module in LAYERS (tests/test_layering.py)"


def test_real_tree_has_no_import_cycles(real_tree):
    assert find_cycles(graph_of(real_tree[1])) == []


def test_real_tree_has_no_upward_imports(real_tree):
    assert upward_imports(graph_of(real_tree[1]), LAYERS) == []


def test_real_tree_imports_no_private_names_across_modules(real_tree):
    assert private_imports(real_tree[1]) == []


def test_node_ownership_has_one_definition(real_tree):
    """Parts own contiguous id ranges: `owner_of` (and the all-to-all layout built on it) is defined once, by
    the partition format, and sampling and exchange import it from there."""
    defined = sorted((module_name(p, PACKAGE), node.name) for p in PACKAGE.rglob("*.py")
                     for node in ast.walk(ast.parse(p.read_text()))
                     if isinstance(node, ast.FunctionDef) and node.name in ("owner_of", "group_by_owner"))
    assert defined == [("mpignn.partition.format", "group_by_owner"), ("mpignn.partition.format", "owner_of")]
    users = {imp.importer for imp in real_tree[1] if imp.target == "mpignn.partition.format"
             and "group_by_owner" in imp.names}
    assert {"mpignn.sampling.distributed", "mpignn.exchange.features", "mpignn.exchange.embedding"} <= users
    from mpignn.partition.format import group_by_owner, owner_of

    offsets = np.array([0, 3, 3, 7])  # part 1 owns nothing
    assert owner_of(np.array([0, 2, 3, 6]), offsets).tolist() == [0, 0, 2, 2]
    owner, order, counts = group_by_owner(np.array([6, 0, 4, 1]), offsets, 3)
    assert owner.tolist() == [2, 0, 2, 0] and order.tolist() == [1, 3, 0, 2] and counts.tolist() == [2, 0, 2]


def untyped_handoffs(root: Path) -> list[str]:
    """Parameters named rt, graph or cfg annotated `Any` (or not at all): the types that cross layers
    (`Runtime`, `LocalGraph`, `TrainConfig`) live below the code that takes them, so none need be."""
    out = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = node.args
                for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
                    if a.arg in ("rt", "graph", "cfg") and (a.annotation is None or "Any" in ast.unparse(a.annotation)):
                        out.append(f"{module_name(path, root)}:{node.lineno} {node.name}({a.arg})")
    return out


def test_handoffs_are_typed(tmp_path):
    pkg = tmp_path / "mpignn"
    pkg.mkdir()
    (pkg / "m.py").write_text("from typing import Any\ndef f(rt: Any, graph, cfg: 'TrainConfig', x: Any): ...\n")
    assert untyped_handoffs(pkg) == ["mpignn.m:2 f(rt)", "mpignn.m:2 f(graph)"]
    assert untyped_handoffs(PACKAGE) == []

"""Every dotted `mpignn.` path the README, docs/, examples/, jobs/ and tests/README.md name resolves: a module,
or an attribute of one (a class, a function, a method), so the tree can move without the docs going stale."""
from __future__ import annotations

import importlib
import re
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent
DOTTED = re.compile(r"(?<![\w./-])mpignn(?:\.[A-Za-z_]\w*)+")


def named_paths() -> dict[str, list[str]]:
    """{dotted path: [file:line, ...]} over the documents."""
    files = [ROOT / "README.md", ROOT / "tests" / "README.md", *sorted((ROOT / "docs").glob("*.md")),
             *sorted(p for p in (ROOT / "examples").rglob("*") if p.is_file()),
             *sorted(p for p in (ROOT / "jobs").rglob("*") if p.is_file())]
    found: dict[str, list[str]] = {}
    for path in files:
        if not path.exists():
            continue
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for m in DOTTED.finditer(line):
                found.setdefault(m.group(0), []).append(f"{path.relative_to(ROOT)}:{n}")
    return found


def resolves(dotted: str) -> bool:
    """`dotted` is a module, or a chain of attributes of the longest module prefix it names."""
    parts = dotted.split(".")
    for k in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:k]))
        except ImportError:
            continue
        for name in parts[k:]:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


def test_the_check_catches_a_stale_path():
    assert resolves("mpignn.training.record.epoch_record") and resolves("mpignn.runtime.Runtime.device")
    assert not resolves("mpignn.loop") and not resolves("mpignn.training.record.no_such_name")


def test_every_named_path_resolves():
    paths = named_paths()
    assert len(paths) > 30
    stale = {p: where[:3] for p, where in sorted(paths.items()) if not resolves(p.rstrip("."))}
    assert not stale, f"paths that name nothing (moved or renamed?): {stale}"


def test_tests_readme_maps_every_test_file():
    text = (ROOT / "tests" / "README.md").read_text()
    missing = [p.stem for p in sorted((ROOT / "tests").glob("test_*.py")) if not re.search(rf"\b{p.stem}\b", text)]
    assert not missing, f"add these to the package table of tests/README.md: {missing}"
    packages = [p.parent.name for p in sorted((ROOT / "mpignn").glob("*/__init__.py"))]
    assert [name for name in packages if f"`{name}`" not in text] == []

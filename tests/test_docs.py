"""The README and docs/ hold together: every relative link (`](path)`, `](path#anchor)`) names a file that exists
and a heading it has, every docs page is in the README's Documentation list, the README is a front page of at most
120 lines whose two top commands are the ones .ci/run runs, and the section titles mpignn's error hints send users
to are headings in docs/ and named in the README. Reads files only (no torch, no MPI)."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def _pages() -> list[Path]:
    return [ROOT / "README.md"] + sorted(DOCS.glob("*.md"))


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped (not - or _), spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text())
    return {_slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", text, re.M)}


def _links(path: Path) -> list[str]:
    return LINK.findall(FENCE.sub("", path.read_text()))


def test_there_are_docs_pages_and_the_readme_lists_each():
    pages = sorted(p.name for p in DOCS.glob("*.md"))
    assert pages, "expected the reference pages under docs/, got none"
    readme = (ROOT / "README.md").read_text()
    listed = readme.split("## Documentation", 1)
    assert len(listed) == 2, "expected a '## Documentation' section in README.md"
    section = listed[1].split("\n## ", 1)[0]
    assert sorted(Path(t).name for t in LINK.findall(section)) == pages


@pytest.mark.parametrize("page", _pages(), ids=lambda p: p.name)
def test_every_relative_link_resolves(page: Path):
    checked = 0
    for target in _links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        assert dest.exists(), f"{page.name}: link ({target}) names {dest}, which does not exist"
        if anchor and dest.suffix == ".md":
            assert anchor in _anchors(dest), f"{page.name}: link ({target}): no heading #{anchor} in {dest.name}"
        checked += 1
    if page.name == "README.md":
        assert checked >= len(list(DOCS.glob("*.md"))), "the README links to every docs page"


def _fenced(text: str) -> list[str]:
    return [b.strip("`\n").split("\n", 1)[1].strip() for b in FENCE.findall(text)]


def test_readme_top_commands_are_what_ci_runs():
    readme = (ROOT / "README.md").read_text()
    top = readme.split("\n## ", 1)[0]
    install, tests = _fenced(top)[:2]
    assert install == ('python3 -m venv .venv && . .venv/bin/activate && pip install torch==2.13.0 '
                       '--extra-index-url https://download.pytorch.org/whl/cpu && pip install -e ".[test]" && '
                       'mpirun -np 2 python -m mpignn.train')
    assert tests == ". .venv/bin/activate && python -m pytest -n 2 --dist loadfile"
    ci = (ROOT / ".ci" / "run").read_text()
    # .ci/run runs the same steps, quietly (-q): each of its pip and pytest lines is part of a README command.
    ci_steps = [line.replace(" -q", "") for line in ci.splitlines()
                if line.startswith(("pip install", "python -m pytest", "python3 -m venv", ". .venv"))]
    assert len(ci_steps) >= 4, ci_steps
    for step in ci_steps:
        assert step in install or step in tests, f".ci/run runs {step!r}, not in the README's top commands"


def test_the_test_extra_puts_mpiexec_into_the_venv():
    """README: `pip install -e ".[test]"` brings the mpich wheel, which puts mpirun/mpiexec into the venv."""
    if sys.prefix == sys.base_prefix:
        pytest.skip("not in a venv (the README installs into .venv)")
    assert "mpich" in re.search(r'"test": \[([^]]*)\]', (ROOT / "setup.py").read_text()).group(1)
    assert all((Path(sys.prefix) / "bin" / exe).exists() for exe in ("mpirun", "mpiexec"))


README_MAX_LINES = 120


def test_readme_is_a_front_page_with_the_ci_commands_on_top():
    """The README stays a front page (details live in docs/), and the first two fenced blocks, before any
    section, are the install+train one-liner and the test command that .ci/run runs (checked step by step in
    test_readme_top_commands_are_what_ci_runs)."""
    readme = (ROOT / "README.md").read_text()
    lines = readme.splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"expected README.md to be a front page of at most {README_MAX_LINES} lines; got {len(lines)}. "
        "HINT: move the details into a docs/*.md page and link it")
    top = readme.split("\n## ", 1)[0]
    blocks = _fenced(top)
    assert len(blocks) >= 2, f"expected the two commands in fenced blocks before the first section; got {blocks}"
    install, tests = blocks[:2]
    assert install.startswith("python3 -m venv .venv && . .venv/bin/activate && ") and install.endswith(
        "mpirun -np 2 python -m mpignn.train"), install
    assert tests == ". .venv/bin/activate && python -m pytest -n 2 --dist loadfile", tests
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert "python -m pytest -q -n 2 --dist loadfile" in ci, "expected .ci/run to run the README's test command (quietly)"


def test_error_hint_sections_exist():
    """Hints such as "see 'Your own graph (npz)' in docs/datasets.md" must lead somewhere: the page has that
    heading."""
    pointers = set()
    for src in (ROOT / "mpignn").rglob("*.py"):
        pointers |= set(re.findall(r"see '([^']+)' in (docs/[\w-]+\.md)", src.read_text()))
    assert len(pointers) >= 3, "expected error hints that point into docs/"
    for title, page in sorted(pointers):
        headings = {m.group(1).strip() for m in re.finditer(r"^#+ (.+)$", FENCE.sub("", (ROOT / page).read_text()), re.M)}
        assert title in headings, f"hint section {title!r} is no heading in {page}"

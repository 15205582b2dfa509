"""The README and docs/ hold together: every relative link (`](path)`, `](path#anchor)`) names a file that exists
and a heading it has, every docs page is in the README's Documentation list, the README's two top commands are the
ones .ci/run runs, and the section titles mpignn's error hints send users to are headings in docs/ and named in the
README. Reads files only (no torch, no MPI)."""
from __future__ import annotations

import re
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
    assert tests == ". .venv/bin/activate && python -m pytest"
    ci = (ROOT / ".ci" / "run").read_text()
    # .ci/run runs the same steps, quietly (-q): each of its pip and pytest lines is part of a README command.
    ci_steps = [line.replace(" -q", "") for line in ci.splitlines()
                if line.startswith(("pip install", "python -m pytest", "python3 -m venv", ". .venv"))]
    assert len(ci_steps) >= 4, ci_steps
    for step in ci_steps:
        assert step in install or step in tests, f".ci/run runs {step!r}, not in the README's top commands"


def test_error_hint_sections_exist():
    """Hints such as "see 'Your own graph (npz)' in the README" must lead somewhere: the README names the
    section and links the page where it is a heading."""
    readme = " ".join((ROOT / "README.md").read_text().split())
    headings = {m.group(1).strip(): p for p in DOCS.glob("*.md")
                for m in re.finditer(r"^#+ (.+)$", FENCE.sub("", p.read_text()), re.M)}
    titles = set()
    for src in (ROOT / "mpignn").rglob("*.py"):
        titles |= set(re.findall(r"see '([^']+)' in the README", src.read_text()))
    assert titles, "expected error hints that point into the README"
    for title in sorted(titles):
        assert title in headings, f"hint section {title!r} is no heading in docs/"
        assert title in readme and f"docs/{headings[title].name}" in readme, title

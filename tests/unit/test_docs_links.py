"""The README and the design page point only at what is in the repository: every relative link resolves, every
anchor names a heading of its page, and every file the design page places a concern in exists."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\]\(([^)\s]+)\)")
CODE = re.compile(r"`[^`\n]*`")  # `operator[](uint64_t)` is code, not a link


def anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors_of(page: Path) -> set[str]:
    return {anchor(line.lstrip("#")) for line in page.read_text().splitlines() if line.startswith("#")}


@pytest.mark.parametrize("page", ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))])
def test_every_relative_link_resolves_inside_the_repository(page):
    source = ROOT / page
    for target in LINK.findall(CODE.sub("", source.read_text())):
        if page == "README.md":  # a newcomer's first page works from the clone alone
            assert "://" not in target, f"{page} links outside the repository: {target}"
        elif "://" in target:
            continue
        path, _, fragment = target.partition("#")
        resolved = (source.parent / path).resolve() if path else source
        assert resolved.is_relative_to(ROOT) and resolved.exists(), f"{page}: {target} does not exist"
        if fragment and resolved.suffix == ".md":
            assert fragment in anchors_of(resolved), f"{page}: no heading for #{fragment} in {resolved.name}"


def design_names() -> set[str]:
    return set(re.findall(r"`([\w/.]+(?:\.py|\.yaml|/))`", (ROOT / "docs/design.md").read_text()))


def test_the_design_page_names_only_files_that_exist():
    rows = [line for line in (ROOT / "docs/design.md").read_text().splitlines() if line.startswith("| ")]
    named = {name for row in rows for name in re.findall(r"`([\w/.]+(?:\.py|\.yaml|/))`", row)}
    assert len(named) > 40  # the concern table, not a stray row
    missing = sorted(n for n in named if not (ROOT / "ascend_pd" / n).exists() and not (ROOT / n).exists())
    assert not missing, f"docs/design.md names files that do not exist: {missing}"


def test_the_design_page_places_every_module():
    """Each module of the package is named on the design page, itself or by its folder (`deploy/rules/`); the
    commands by their file name in the paragraph on cli/."""
    named = design_names()
    unplaced = []
    for path in sorted((ROOT / "ascend_pd").rglob("*.py")):
        relative = path.relative_to(ROOT / "ascend_pd").as_posix()
        if path.name in ("__init__.py", "__main__.py"):
            continue
        if relative.startswith("cli/"):
            placed = path.name in named
        else:
            folders = {relative.rsplit("/", depth)[0] + "/" for depth in range(1, relative.count("/") + 1)}
            placed = relative in named or bool(folders & named)
        if not placed:
            unplaced.append(relative)
    assert not unplaced, f"docs/design.md does not say where these live: {unplaced}"

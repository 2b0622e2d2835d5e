"""tools/broken_changes.py stays able to break what it names: each change's text is in its file once, in the code
as it is now, and the tests meant to catch it exist."""

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("broken_changes", REPO / "tools" / "broken_changes.py")
broken_changes = sys.modules.setdefault("broken_changes", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(broken_changes)
BREAKS = broken_changes.BREAKS


def test_every_test_folder_has_one_broken_change():
    folders = {p.parent.relative_to(REPO).as_posix() for p in (REPO / "tests").rglob("test_*.py")}
    assert sorted(b.folder for b in BREAKS) == sorted(folders)


@pytest.mark.parametrize("brk", BREAKS, ids=[b.folder for b in BREAKS])
def test_the_change_applies_to_the_code_as_it_is_and_its_tests_exist(brk):
    text = (REPO / brk.file).read_text()
    assert text.count(brk.old) == 1, f"{brk.file} no longer holds the text this change breaks: {brk.old!r}"
    assert brk.old != brk.new
    args = brk.tests or (brk.folder,)
    paths = [arg for arg in args if arg.endswith(".py") or (REPO / arg).is_dir()]
    assert paths and all((REPO / path).exists() for path in paths if path.endswith(".py")), args
    assert all(path == brk.folder or path.startswith(brk.folder + "/") for path in paths)


def test_the_summary_names_the_first_failed_test():
    output = "....F\n=== short test summary info ===\nFAILED tests/unit/x/test_a.py::test_b[1] - assert 1 == 2\n" \
             "ERROR tests/unit/x/test_c.py::test_d\n1 failed"
    assert broken_changes.first_failure(output) == "tests/unit/x/test_a.py::test_b[1]"
    assert broken_changes.first_failure("5 passed") is None

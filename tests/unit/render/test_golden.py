"""Rendering each shipped example reproduces the files checked in under tests/golden/<example>/.

After an intended change, run `python tools/render_update_golden.py` and review `git diff tests/golden`."""

import difflib

import pytest

from .conftest import EXAMPLE_NAMES, bundle_of, golden_dir


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_render_matches_golden_files(name):
    expected_dir = golden_dir() / name
    assert expected_dir.is_dir(), f"no golden files for {name}: run python tools/render_update_golden.py"
    expected = {str(p.relative_to(expected_dir)): p.read_text() for p in expected_dir.rglob("*") if p.is_file()}
    result = bundle_of(name)
    assert not result.refused
    assert sorted(result.files) == sorted(expected), "the set of rendered files changed"
    for path, text in result.files.items():
        if text != expected[path]:
            diff = "".join(difflib.unified_diff(expected[path].splitlines(True), text.splitlines(True),
                                                f"golden/{name}/{path}", f"rendered/{path}"))
            pytest.fail(f"{name}/{path} differs from its golden file:\n{diff[:4000]}")


def test_a_changed_example_shows_as_a_diff(a2_example):
    from .conftest import loaded_from
    from ascend_pd.render import render_bundle

    a2_example["instances"][0]["vllm"]["max_num_seqs"] = 17
    files = render_bundle(loaded_from(a2_example)).files
    golden = (golden_dir() / "atlas-800i-a2-x4-qwen3-32b" / "launch-a2-00.sh").read_text()
    diff = [line for line in difflib.unified_diff(golden.splitlines(), files["launch-a2-00.sh"].splitlines(), n=0)
            if line.startswith(("-", "+")) and not line.startswith(("---", "+++"))]
    assert diff == ["-    --max-num-seqs 16 \\", "+    --max-num-seqs 17 \\"]

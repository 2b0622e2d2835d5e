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


def test_a_changed_example_shows_as_a_diff():
    import yaml

    from .conftest import EXAMPLES, loaded_from
    from ascend_pd.render import render_bundle

    name = "atlas-800i-a2-x4-qwen3-32b"
    data = yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text())
    first = data["instances"][0]
    seqs = first["vllm"]["max_num_seqs"]
    first["vllm"]["max_num_seqs"] = seqs + 1
    launcher = f"launch-{first['devices'][0]['node']}.sh"
    files = render_bundle(loaded_from(data)).files
    golden = (golden_dir() / name / launcher).read_text()
    diff = [line for line in difflib.unified_diff(golden.splitlines(), files[launcher].splitlines(), n=0)
            if line.startswith(("-", "+")) and not line.startswith(("---", "+++"))]
    assert diff == [f"-    --max-num-seqs {seqs} \\", f"+    --max-num-seqs {seqs + 1} \\"]

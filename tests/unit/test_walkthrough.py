"""docs/walkthrough.md's offline commands, run as the page shows them: every ```console block holds `$ ascend-pd ...`
lines, each followed by the output the page shows for it. They run in order in one fresh directory, and each must
exit 0 and print every output line the page shows (`...` marks where the page leaves lines out), so the page cannot
drift from the code unnoticed. The steps that need running engines are ```text blocks, which the e2e tests cover."""

from __future__ import annotations

import importlib.util
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.cli_runner import run_cli

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "walkthrough.md"
PROMPT = "$ "
ELIDED = "..."
WIDTH = "120"  # the terminal width the page's tables were printed at
TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC")


@dataclass
class Step:
    args: list[str]
    shown: list[str]  # the output lines the page shows, elisions left out


def console_steps(text: str) -> list[Step]:
    """Each `$ ascend-pd` command of the page's console blocks, in page order, with the output shown under it."""
    steps: list[Step] = []
    for block in re.findall(r"^```console\n(.*?)^```", text, flags=re.DOTALL | re.MULTILINE):
        for line in block.splitlines():
            if line.startswith(PROMPT):
                words = shlex.split(line[len(PROMPT):])
                assert words[0] == "ascend-pd", f"a console block runs only ascend-pd, not: {line}"
                steps.append(Step(words[1:], []))
            elif line.strip() != ELIDED:
                assert steps, f"output before any command in a console block: {line}"
                steps[-1].shown.append(line)
    return steps


def normal(line: str) -> str:
    """A line as compared: trailing blanks (rich pads its tables) and clock times left out."""
    return TIMESTAMP.sub("<time>", line.rstrip())


def missing_lines(shown: list[str], output: str) -> list[str]:
    printed = {normal(line) for line in output.splitlines()}
    return [line for line in shown if normal(line) not in printed]


def test_the_pages_console_blocks_run_and_print_what_the_page_shows(tmp_path, monkeypatch):
    steps = console_steps(PAGE.read_text(encoding="utf-8"))
    assert len(steps) >= 9, "the page lost its console blocks"
    (tmp_path / "superpod_configs").symlink_to(ROOT / "superpod_configs")  # the rehearsal names the clone's files
    monkeypatch.chdir(tmp_path)
    for step in steps:
        command = "ascend-pd " + shlex.join(step.args)
        result = run_cli(*step.args, env={"COLUMNS": WIDTH})
        assert result.returncode == 0, f"`{command}` exited {result.returncode}:\n{result.stdout}{result.stderr}"
        missing = missing_lines(step.shown, result.stdout + result.stderr)
        assert not missing, (f"docs/walkthrough.md shows lines `{command}` no longer prints:\n" + "\n".join(missing)
                             + f"\n--- it printed:\n{result.stdout}{result.stderr}")


def test_the_walkthrough_picture_is_drawn_by_commands_the_page_runs():
    """tools/make_pictures.py draws docs/pictures/walkthrough-placement.png with its own copy of the commands."""
    spec = importlib.util.spec_from_file_location("make_pictures", ROOT / "tools" / "make_pictures.py")
    tools_dir = str(ROOT / "tools")
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(tools_dir)  # it imports its sibling modules
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    page_commands = [step.args for step in console_steps(PAGE.read_text(encoding="utf-8"))]
    for args in module.WALKTHROUGH_COMMANDS:
        assert list(args) in page_commands, f"the page does not run `ascend-pd {shlex.join(args)}`"


def test_a_shown_line_the_command_does_not_print_is_caught():
    steps = console_steps("```console\n$ ascend-pd show cluster c.yaml\n...\nnodes: 2\n```\n")
    assert [(s.args, s.shown) for s in steps] == [(["show", "cluster", "c.yaml"], ["nodes: 2"])]
    assert missing_lines(steps[0].shown, "nodes: 3\n") == ["nodes: 2"]
    assert missing_lines(["kept 2026-01-01 00:00:00 UTC"], "kept 2027-05-05 10:11:12 UTC  \n") == []

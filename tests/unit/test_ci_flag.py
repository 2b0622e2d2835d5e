""".ci/run and the tests read CI one way: the same values turn strict mode on in both."""

import re
import subprocess
from pathlib import Path

import pytest

from tests.ci import in_ci

ROOT = Path(__file__).resolve().parents[2]


def ci_run_reads(value: str) -> bool:
    block = re.search(r"^case .*?^esac$", (ROOT / ".ci/run").read_text(), re.S | re.M).group(0)
    shown = subprocess.run(["bash", "-c", block + '\nprintf %s "${CI:-}"'], env={"CI": value, "PATH": "/usr/bin:/bin"},
                           capture_output=True, text=True, check=True).stdout
    assert shown in ("true", ""), shown  # what the tests then see is either strict or unset
    return shown == "true"


@pytest.mark.parametrize("value", ["true", "TRUE", "True", "1", "yes", " true", "false", "0", "no", "", "ci"])
def test_ci_run_and_the_tests_agree_on_what_turns_strict_mode_on(value, monkeypatch):
    monkeypatch.setenv("CI", value)
    assert ci_run_reads(value) == in_ci()

"""Write the shipped example deployments (superpod_configs/deployments/) from `ascend-pd plan`, each with its command.

Usage: python tools/make_examples.py [--check]

Each example is exactly what its recorded `ascend-pd plan` command writes, under a header that says what the example
shows and gives the command. The calibration is named in every command, so an example moves only when the planner
does, never with the default profile. A leading `# yaml-language-server: $schema=...` line is kept. With --check
nothing is written: the examples that drifted from their command are listed and the exit status is 1
(tests/unit/deploy/test_examples_from_plan.py runs the same check). local-cpu-tiny-gqa.yaml is written by hand and
left alone (its header says why).
"""

from __future__ import annotations

import contextlib
import io
import shlex
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ascend_pd.hardware import configs_dir

SCHEMA_LINE = "# yaml-language-server:"  # an editor's schema comment, kept as the file's first line
DEEPSEEK_WORKLOAD = ("--model", "deepseek-r1", "--input-mean", "3500", "--input-p99", "16000", "--input-dist",
                     "lognormal", "--output-mean", "1200", "--ttft-ms", "2000", "--tpot-ms", "50")


@dataclass(frozen=True)
class Example:
    name: str  # file stem under superpod_configs/deployments/
    shows: str  # what the example is for, for its header
    plan_args: tuple[str, ...]  # `ascend-pd plan` arguments, without --out


EXAMPLES = (
    Example("atlas-800i-a2-x4-qwen3-32b",
            "Qwen3-32B BF16 on an Atlas 800I A2 cluster, disaggregated: ascend-pd's connector pulling over the "
            "Ascend transport. At this rate and SLO the planner chooses PD (no colocated shape meets TPOT 40 ms) "
            "and needs one of the four nodes.",
            ("--model", "qwen3-32b", "--cluster", "atlas-800i-a2-x4", "--input-mean", "2048", "--input-p99", "3240",
             "--input-dist", "normal", "--output-mean", "512", "--ttft-ms", "1500", "--tpot-ms", "40",
             "--rate", "4", "--connector", "ascend-pd", "--kv-mode", "pull", "--calibration", "vllm-ascend")),
    Example("atlas-800t-a3-x4-deepseek-r1",
            "DeepSeek-R1 W8A8 on four stand-alone Atlas 800T A3 nodes, disaggregated with vllm-ascend's own "
            "MooncakeConnectorV1 (pull). MTP is off: with one draft token the planner gives decode a batch that "
            "validate warns its KV cache cannot hold at full length (APD206).",
            (*DEEPSEEK_WORKLOAD, "--cluster", "atlas-800t-a3-x4", "--rate", "3", "--mtp", "0", "--connector",
             "vllm-ascend", "--kv-mode", "pull", "--calibration", "vllm-ascend")),
    Example("cloudmatrix384-deepseek-r1",
            "DeepSeek-R1 W8A8 on one CloudMatrix384, disaggregated: ascend-pd's connector pushing KV layer by layer "
            "over the Ascend transport inside the SuperPoD.",
            (*DEEPSEEK_WORKLOAD, "--cluster", "cloudmatrix384", "--rate", "10", "--connector", "ascend-pd",
             "--kv-mode", "push", "--calibration", "vllm-ascend")),
    Example("cloudmatrix384-x2-deepseek-r1",
            "DeepSeek-R1 W8A8 on two CloudMatrix384 SuperPoDs joined by RoCE, at a rate one SuperPoD cannot carry: "
            "the planner gives each SuperPoD its own serving group, so KV never leaves the UB fabric.",
            (*DEEPSEEK_WORKLOAD, "--cluster", "cloudmatrix384-x2", "--rate", "100", "--connector", "ascend-pd",
             "--kv-mode", "push", "--calibration", "vllm-ascend")),
)


def example_path(example: Example) -> Path:
    return configs_dir() / "deployments" / f"{example.name}.yaml"


def command(example: Example) -> str:
    return shlex.join(["ascend-pd", "plan", *example.plan_args, "--out", "DIR"])


def planned_yaml(example: Example) -> str:
    """The deployment.yaml the example's command writes, run in this process, without a leading schema line (the
    one plan writes points beside its output, not at superpod_configs/schemas/)."""
    from ascend_pd.cli.main import cli

    with tempfile.TemporaryDirectory() as out, contextlib.redirect_stdout(io.StringIO()):
        cli.main(["plan", *example.plan_args, "--out", out, "--format", "json"], standalone_mode=False)
        text = (Path(out) / "deployment.yaml").read_text(encoding="utf-8")
    return text.split("\n", 1)[1] if text.startswith(SCHEMA_LINE) else text


def _header(example: Example, schema_line: str | None) -> str:
    lines = [schema_line] if schema_line else []
    words = example.shows.split()
    row = "#"
    for word in words:  # wrap the description at 118 columns
        if len(row) + 1 + len(word) > 118:
            lines.append(row)
            row = "#"
        row += " " + word
    lines += [row, "# Written by tools/make_examples.py, not by hand: the DIR/deployment.yaml of",
              f"#   {command(example)}"]
    return "\n".join(lines) + "\n"


def example_text(example: Example) -> str:
    """What the example file should hold: its leading schema line (if any), its header and the planned YAML."""
    path = example_path(example)
    first = path.read_text(encoding="utf-8").splitlines()[0] if path.exists() else ""
    schema_line = first if first.startswith(SCHEMA_LINE) else None
    return _header(example, schema_line) + planned_yaml(example)


def drifted() -> list[str]:
    """Names of the examples whose file differs from what their command writes."""
    return [e.name for e in EXAMPLES if example_path(e).read_text(encoding="utf-8") != example_text(e)]


def main(argv: list[str]) -> int:
    if argv == ["--check"]:
        stale = drifted()
        for name in stale:
            print(f"{name}.yaml differs from its plan: run python tools/make_examples.py", file=sys.stderr)
        return 1 if stale else 0
    if argv:
        print(__doc__, file=sys.stderr)
        return 2
    for example in EXAMPLES:
        example_path(example).write_text(example_text(example), encoding="utf-8")
        print(f"wrote {example_path(example)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

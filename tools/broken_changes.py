"""One deliberately broken change per test folder, and the test of that folder that catches it.

Usage: python tools/broken_changes.py [FOLDER ...]   (e.g. tests/unit/proxy; default: every folder below)

Each change is a bug a user would meet (named in BREAKS). It is made in a clean copy of the last commit (a git
worktree in a temporary directory), the folder's tests run there as the suite runs them (two pytest-xdist
processes; one at a time for the e2e case) and stop at the first failure. The test that failed then runs again
without the change and must pass, so that a failure unrelated to the change is never counted as a catch. Exit
status 1 when a change was not caught. The e2e case starts real engines: about two minutes on 2 cores; every other
folder takes seconds to a minute.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PYTEST = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", "-rfE"]
PARALLEL = ["-n", "2", "--dist", "loadgroup"]


@dataclass(frozen=True)
class Break:
    folder: str  # the tests that must catch it
    file: str
    old: str  # found exactly once in `file`
    new: str
    bug: str  # what a user would meet
    tests: tuple[str, ...] = ()  # pytest arguments, when not the whole folder
    parallel: bool = True


BREAKS = [
    Break("tests/unit", "ascend_pd/planner/plan.py",
          "from __future__ import annotations\n",
          "from __future__ import annotations\nimport ascend_pd.proxy.app  # noqa: F401\n",
          "the planner imports the proxy's server: a layer broken, aiohttp needed to plan",
          tests=tuple(str(p.relative_to(REPO)) for p in sorted((REPO / "tests/unit").glob("test_*.py")))),
    Break("tests/unit/autoscale", "ascend_pd/autoscale/loop.py",
          "cooling = since is not None and since < self.settings.cooldown", "cooling = False",
          "the autoscaler changes the deployment again within its cooldown"),
    Break("tests/unit/cli", "ascend_pd/cli/common.py",
          '            click.echo(f"error: {exc.render()}", err=True)\n            sys.exit(EXIT_BAD_INPUT)',
          "            raise",
          "bad input ends in a traceback instead of an error naming the file, the field and the fix"),
    Break("tests/unit/connector", "ascend_pd/connector/side_channel.py",
          "_MAX_FRAME_BYTES = messages.MAX_MESSAGE_BYTES + 33", "_MAX_FRAME_BYTES = -1",
          "the side channel takes a frame of any size from any peer"),
    Break("tests/unit/deploy", "ascend_pd/deploy/rules/ports.py",
          "                yield other, claim\n", "                yield from ()\n",
          "validate passes two endpoints that share a port on one host"),
    Break("tests/unit/hardware", "ascend_pd/hardware/loader.py",
          "next_ip(group.host_ip_start, i)", "next_ip(group.host_ip_start, i + 1)",
          "every node of a group gets the next node's address"),
    Break("tests/unit/kernels", "ascend_pd/kernels/tp_mapping.py",
          "dst_head_start=start - wanted.start", "dst_head_start=0",
          "a decode rank that gathers KV heads from several prefill ranks writes each at its first head",
          tests=("tests/unit/kernels/test_tp_mapping.py", "tests/unit/kernels/test_tp_mapping_across_processes.py")),
    Break("tests/unit/models", "ascend_pd/models/hf_config.py",
          'kv_heads = cfg.get("num_key_value_heads") or heads', "kv_heads = heads",
          "a GQA model's KV is sized as if every attention head had its own"),
    Break("tests/unit/perf", "ascend_pd/perf/cost.py",
          "total = max(device, framework + schedule)", "total = device",
          "the cost model forgets the host's launch and scheduling work per step"),
    Break("tests/unit/planner", "ascend_pd/planner/prefill_queue.py",
          "return len(self.prompts) / busy\n", "return 2 * len(self.prompts) / busy\n",
          "the planner takes a prefill rank for twice as fast as it is"),
    Break("tests/unit/proxy", "ascend_pd/proxy/openai_body.py",
          "        body.pop(name, None)\n", "        body.get(name)\n",
          "a client's own kv_transfer_params reach the engines through the proxy"),
    Break("tests/unit/render", "ascend_pd/render/kv_config.py",
          '"kv_connector": "AscendPDConnector",', '"kv_connector": "MooncakeConnectorV1",',
          "engines rendered for the ascend-pd connector load vllm-ascend's instead"),
    Break("tests/integration/autoscale", "ascend_pd/autoscale/control_plane.py",
          '                seen["proxy_inflight"] += backend.get("proxy_inflight", backend["inflight"])\n'
          '                seen["inflight"] += backend["inflight"]\n',
          '                seen["proxy_inflight"] = backend.get("proxy_inflight", backend["inflight"])\n'
          '                seen["inflight"] = backend["inflight"]\n',
          "a drain counts the requests in flight on the last proxy replica only"),
    Break("tests/integration/connector", "ascend_pd/connector/pull_worker.py",
          "deadline=now + self.config.kv_load_timeout_s", "deadline=now + 10 * self.config.kv_load_timeout_s",
          "decode waits ten times kv_load_timeout_s for a prefill that never answers"),
    Break("tests/integration/deploy", "ascend_pd/deploy/check/kv_evidence.py",
          'if delta.get("kv_transfers", 0) >= 1 and delta.get("kv_bytes", 0) > 0]',
          'if delta.get("kv_transfers", 0) >= 0]',
          "`ascend-pd check` passes a decode engine that computed the canary's prompt itself"),
    Break("tests/integration/planner", "ascend_pd/planner/ports.py",
          "kv = max(self.next_kv.get(h, self.kv_window[0]) for h in hosts)",
          "kv = max([self.kv_window[0], *self.next_kv.values()])",
          "the planner numbers side-channel ports in one sequence across the cluster, past 65535 on 64 SuperPoDs"),
    Break("tests/integration/proxy", "ascend_pd/proxy/policies/least_loaded.py",
          "return first if first_load < second_load else second", "return first",
          "the least-loaded proxy sends every request to the first backend it looked at"),
    Break("tests/integration/render", "ascend_pd/render/shell.py",
          '|| ((++tries > 50)); do', "|| true; do",
          "a launcher returns before its process leads a process group, so a stop right after misses it"),
    Break("tests/e2e", "ascend_pd/proxy/openai_body.py",
          '    decode["kv_transfer_params"] = kv_transfer_params\n', "",
          "the proxy sends D no KV coordinates, so D computes every prompt again",
          tests=("tests/e2e/test_pd_on_cpu.py", "-k", "gqa-pull and not tp2"), parallel=False),
]


def sh(*cmd: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)


def first_failure(output: str) -> str | None:
    """The node id of the first FAILED or ERROR line of pytest's short summary."""
    for line in output.splitlines():
        match = re.match(r"(FAILED|ERROR) (\S+)", line)
        if match:
            return match.group(2)
    return None


def replace_once(path: Path, old: str, new: str) -> str:
    text = path.read_text()
    if text.count(old) != 1:
        raise SystemExit(f"{path}: the text to break occurs {text.count(old)} times, not once: {old!r}")
    path.write_text(text.replace(old, new))
    return text


def try_break(brk: Break, tree: Path, env: dict) -> tuple[bool, str, float]:
    """(caught, what happened, seconds)."""
    target = tree / brk.file
    original = replace_once(target, brk.old, brk.new)
    started = time.monotonic()
    try:
        args = [*PYTEST, *(PARALLEL if brk.parallel else []), *(brk.tests or (brk.folder,))]
        broken = sh(sys.executable, *args, cwd=tree, env=env)
    finally:
        target.write_text(original)
    seconds = time.monotonic() - started
    failed = first_failure(broken.stdout)
    if broken.returncode == 0 or failed is None:
        return False, f"not caught (pytest exited {broken.returncode})", seconds
    intact = sh(sys.executable, *PYTEST, failed, cwd=tree, env=env)
    if intact.returncode != 0:
        return False, f"{failed} failed, but fails without the change too", seconds
    return True, failed, seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="*", help="test folders to try (default: all)")
    chosen = parser.parse_args().folders
    unknown = set(chosen) - {b.folder for b in BREAKS}
    if unknown:
        parser.error(f"no broken change for {sorted(unknown)}; folders: {', '.join(b.folder for b in BREAKS)}")
    breaks = [b for b in BREAKS if not chosen or b.folder in chosen]
    missed = 0
    with tempfile.TemporaryDirectory(prefix="broken-changes-") as scratch:
        tree = Path(scratch) / "tree"
        subprocess.run(["git", "worktree", "add", "--detach", str(tree), "HEAD"], cwd=REPO, check=True,
                       capture_output=True)
        try:
            env = dict(os.environ, PYTHONPATH=str(tree), PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
            imported = sh(sys.executable, "-c", "import ascend_pd; print(ascend_pd.__file__)", cwd=tree, env=env)
            if not imported.stdout.startswith(str(tree)):
                raise SystemExit(f"ascend_pd loads from {imported.stdout.strip() or imported.stderr}, not {tree}")
            print("| folder | broken change | caught by | seconds |\n|---|---|---|---|", flush=True)
            for brk in breaks:
                caught, said, seconds = try_break(brk, tree, env)
                missed += not caught
                shown = f"`{said.removeprefix(brk.folder + '/')}`" if caught else f"**{said}**"
                print(f"| {brk.folder} | {brk.bug} (`{brk.file}`) | {shown} | {seconds:.0f} |", flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=REPO, capture_output=True)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())

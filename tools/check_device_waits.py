"""Show that every device wait and thread binding of the connector is needed: remove each one in turn and run the
NPU-twin transfer tests, which must then fail.

Usage: python tools/check_device_waits.py        (about 1.5 minutes on 2 cores; the tree is restored afterwards)

Each line prints the removed statement and whether the twin tests caught it. Exit status 1 if one was not caught.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONNECTOR = ROOT / "ascend_pd" / "connector"
TWIN_TESTS = "tests/integration/connector/test_transfer.py"

# (file, the exact statement, the replacement, which twin cases exercise it)
REMOVALS = [
    ("push_sender.py", "self.device.wait(job.written)", "pass", "twin and push"),
    ("push_sender.py", "self.device.drain()  # the engine reads", "pass  #", "twin and push and p_tp1_to_d_tp2"),
    ("push_sender.py", "        self.device.wait(written)\n", "        pass\n", "stamps_the_prefill_end"),
    ("push_receiver.py", "self.device.drain()  # vLLM may run", "pass  #", "twin and push"),
    ("pull_worker.py", "self.device.drain()\n", "pass\n", "twin and pull"),
    ("pull_worker.py", "self.device.drain()  # the next chunk", "pass  #", "twin and pull and p_tp1_to_d_tp2"),
    ("worker.py", "        self.device.bind_thread()\n", "        pass\n", "twin"),
]


def caught(cases: str) -> bool:
    with tempfile.TemporaryDirectory() as base:
        result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", TWIN_TESTS,
                                 "-k", cases, f"--basetemp={base}"], cwd=ROOT, capture_output=True, text=True)
    return result.returncode == 1


def main() -> int:
    missed = 0
    for name, statement, replacement, cases in REMOVALS:
        path = CONNECTOR / name
        original = path.read_text()
        if original.count(statement) != 1:
            print(f"{name}: '{statement.strip()}' is not in the code once; update this tool")
            return 2
        try:
            path.write_text(original.replace(statement, replacement))
            found = caught(cases)
        finally:
            path.write_text(original)
        missed += not found
        print(f"{'caught' if found else 'MISSED'}: {name}: {statement.strip()}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())

"""Regenerate tests/golden/<example>/ from every example deployment: run after an intended change to render, then
review the diff (`git diff tests/golden`) before committing it."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from ascend_pd.deploy import load_deployment
from ascend_pd.hardware import configs_dir
from ascend_pd.render import render_bundle

GOLDEN = Path(__file__).resolve().parent.parent / "tests" / "golden"


def main() -> int:
    for example in sorted((configs_dir() / "deployments").glob("*.yaml")):
        result = render_bundle(load_deployment(example))
        if result.refused:
            print(f"{example.name}: does not validate, not rendered", file=sys.stderr)
            return 1
        target = GOLDEN / example.stem
        shutil.rmtree(target, ignore_errors=True)
        # the rendered text only: write_bundle would add the bundle's secrets, which no repository may hold
        for relative, text in result.files.items():
            (target / relative).parent.mkdir(parents=True, exist_ok=True)
            (target / relative).write_text(text, encoding="utf-8")
        print(f"{example.stem}: {len(result.files)} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What the launcher and rollout tests start from: the shipped local-cpu example rendered into a bundle, a change
that adds one decode instance to it, a kubectl stand-in that records its calls, and a saved workload window."""

import json
from collections import Counter
from pathlib import Path

from ascend_pd.deploy import LoadedDeployment, load_deployment
from ascend_pd.deploy.schema import Deployment
from ascend_pd.perf.shape import Shape
from ascend_pd.planner.resize import Step, counts_of, resize
from ascend_pd.render import RenderOptions, render_bundle, write_bundle

ROOT = Path(__file__).resolve().parents[3]


def example_bundle(tmp_path: Path, target: str) -> Path:
    """The shipped local-cpu example rendered for `target` into tmp_path/bundle; its deployment file."""
    source = load_deployment(ROOT / "superpod_configs" / "deployments" / "local-cpu-tiny-gqa.yaml")
    bundle = tmp_path / "bundle"
    write_bundle(render_bundle(source, RenderOptions(target=target)).files, bundle)
    return bundle / "deployment.yaml"


def one_more_decode(current: LoadedDeployment) -> tuple[Deployment, list[Step]]:
    """`current` with a second decode instance like its first, and the steps there."""
    one = Shape()
    decode = next(i for i in current.deployment.instances if i.role == "decode")
    return resize(current.deployment, current.cluster(), counts_of(current.deployment)
                  + Counter({("decode", one): 1}), {("decode", one): decode.vllm})


def recording_kubectl(tmp_path: Path) -> tuple[str, Path]:
    calls = tmp_path / "calls.jsonl"
    script = tmp_path / "kubectl"
    script.write_text("#!/usr/bin/env python3\nimport json, sys\n"
                      f"open({str(calls)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n")
    script.chmod(0o755)
    return str(script), calls


def saved_window(tmp_path: Path) -> Path:
    """A proxy's workload window as `autoscale --proxy FILE` reads it: 2 req/s of 64-token prompts and answers."""
    saved = tmp_path / "window.json"
    spread = {"mean": 64, "p50": 64, "p90": 64, "p99": 64}
    saved.write_text(json.dumps({"window_seconds": 60, "requests": 120, "finished": 120, "failed": 0,
                                 "rate_rps": 2.0, "prompt_tokens": spread, "output_tokens": spread,
                                 "ttft_seconds": None, "tpot_seconds": None, "streamed": 0}))
    return saved

"""The import layering docs/design.md states, checked on every import statement of the package (those inside
functions too), and the base install's promise: plan, validate and render load no torch, vLLM or aiohttp."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "ascend_pd"

# docs/design.md, "Layers": a package imports from its own layer or a lower one. The loose modules at the top are
# below everything: they import nothing of the package but each other.
LAYERS = {
    "errors": 0, "defaults": 0, "yamlfile": 0, "atomic": 0,
    "hardware": 1, "models": 1,
    "perf": 2, "deploy": 2,
    "planner": 3, "render": 3,
    "proxy": 4, "kernels": 4, "connector": 4, "autoscale": 4,
    "cli": 5,
}
# Inside a layer, who may import whom (a pair not listed may not).
SIDEWAYS = {("deploy", "perf"), ("connector", "kernels"), ("autoscale", "proxy"), ("yamlfile", "errors")}
# the endpoint list, the backend table and the workload window's data: what the proxy says, never its server
AUTOSCALE_READS_OF_PROXY = {"ascend_pd.proxy.endpoints", "ascend_pd.proxy.backend_table",
                            "ascend_pd.proxy.workload_window"}
PROXY_READS_BELOW = {"deploy", "defaults", "errors", "atomic"}
HEAVY = {"torch", "torch_npu", "vllm", "vllm_ascend", "mooncake", "aiohttp", "zmq", "httptools", "uvloop"}


def package_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def imports() -> list[tuple[str, str, str]]:
    """(file, importing package, imported module) for every absolute import in ascend_pd/."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                # `from ascend_pd import kernels` imports the subpackage
                names = ([f"ascend_pd.{alias.name}" for alias in node.names] if node.module == "ascend_pd"
                         else [node.module])
            else:
                continue
            found += [(str(path.relative_to(ROOT)), package_of(module), name) for name in names]
    return found


def test_every_package_has_a_layer():
    packages = {package_of(".".join(p.relative_to(ROOT).with_suffix("").parts)) for p in PACKAGE.rglob("*.py")}
    assert packages - {"__init__", "__main__"} <= set(LAYERS), "place the new package in LAYERS and design.md"


def test_no_import_reaches_a_higher_layer_or_sideways_without_leave():
    wrong = []
    for file, importer, name in imports():
        if not name.startswith("ascend_pd.") or importer in ("", "__init__"):
            continue
        imported = package_of(name)
        if imported in ("", "__version__") or imported == importer:
            continue
        if LAYERS[imported] > LAYERS[importer]:
            wrong.append(f"{file}: {importer} (layer {LAYERS[importer]}) imports {name} (layer {LAYERS[imported]})")
        elif LAYERS[imported] == LAYERS[importer] and (importer, imported) not in SIDEWAYS:
            wrong.append(f"{file}: {importer} imports {name} sideways")
    assert not wrong, "\n".join(wrong)


def test_the_proxy_reads_only_the_deployment_contract_below_it_and_the_autoscaler_only_its_data():
    wrong = []
    for file, importer, name in imports():
        imported = package_of(name) if name.startswith("ascend_pd.") else None
        if importer == "proxy" and imported not in (None, "proxy") and imported not in PROXY_READS_BELOW:
            wrong.append(f"{file} imports {name}")
        if importer == "autoscale" and imported == "proxy" and name not in AUTOSCALE_READS_OF_PROXY:
            wrong.append(f"{file} imports {name}")
    assert not wrong, "\n".join(wrong)


def test_no_heavy_library_is_imported_where_it_does_not_belong():
    allowed = {"proxy": {"aiohttp", "httptools", "uvloop"}, "kernels": {"torch", "torch_npu"},
               "connector": {"torch", "torch_npu", "vllm", "vllm_ascend", "mooncake", "zmq"}}
    wrong = [f"{file} imports {name}" for file, importer, name in imports()
             if name.split(".")[0] in HEAVY and name.split(".")[0] not in allowed.get(importer, set())]
    assert not wrong, "\n".join(wrong)


def test_plan_validate_and_render_run_without_loading_torch_vllm_or_aiohttp(tmp_path):
    """In one process: plan a deployment, validate it, render it, then list what was loaded."""
    script = f"""
import json, sys
from ascend_pd.cli.main import cli
for args in (["plan", "--model", "qwen3-32b", "--cluster", "atlas-800i-a2-x4", "--out", {str(tmp_path / "plan")!r}],
             ["validate", {str(tmp_path / "plan" / "deployment.yaml")!r}],
             ["render", {str(tmp_path / "plan" / "deployment.yaml")!r}, "--out", {str(tmp_path / "bundle")!r}]):
    try:
        cli.main(args, standalone_mode=False)
    except SystemExit as stop:
        assert not stop.code, (args, stop.code)
print(json.dumps(sorted({{name.split(".")[0] for name in sys.modules}})))
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    loaded = set(json.loads(done.stdout.strip().splitlines()[-1]))
    assert (tmp_path / "bundle").is_dir()
    assert not loaded & HEAVY, f"the base commands loaded {sorted(loaded & HEAVY)}"
    assert "ascend_pd" in loaded

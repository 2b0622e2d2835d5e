"""The container image ascend-pd ships (docker/Dockerfile) and the vllm-ascend image it is built on, named once:
render's default --image (for the release a deployment pins), the k8s manifests and tests/unit/render/test_image.py
(which checks the Dockerfile)."""

from __future__ import annotations

from ascend_pd import __version__
from ascend_pd.defaults import VLLM_ASCEND_RELEASE

# The release is inside the `ascend` extra's range (pyproject.toml). vllm-ascend publishes one image per release
# tag: quay.io/ascend/vllm-ascend:v<release> for A2 (910B), with -a3, -310p and -openeuler variants
# (.github/workflows/_schedule_image_build.yaml, type=pep440).
BASE_REPOSITORY = "quay.io/ascend/vllm-ascend"
BASE_TAG = f"v{VLLM_ASCEND_RELEASE}"
BASE_IMAGE = f"{BASE_REPOSITORY}:{BASE_TAG}"
A3_SUFFIX = "-a3"  # the same release built for Atlas A3 (910C): docker build --build-arg VLLM_ASCEND_TAG=<tag>-a3

IMAGE_REPOSITORY = "ascend-pd"


def image_tag(release: str | None = None) -> str:
    """The tag names both what it holds, so a manifest never runs a `latest` that moved: ascend-pd's version and the
    vllm-ascend release under it (default: the one ascend-pd pins)."""
    return f"{__version__}-vllm-ascend-v{release or VLLM_ASCEND_RELEASE}"


def default_image(release: str | None = None) -> str:
    """The image render names for a deployment whose engines run vllm-ascend `release`: docker/Dockerfile builds it
    with `--build-arg VLLM_ASCEND_TAG=v<release>`."""
    return f"{IMAGE_REPOSITORY}:{image_tag(release)}"


IMAGE_TAG = image_tag()
DEFAULT_IMAGE = default_image()

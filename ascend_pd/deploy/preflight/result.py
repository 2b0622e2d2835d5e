"""The outcome of one preflight check: pass, fail or skip, what was seen, and the fix when it failed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Status = Literal["pass", "fail", "skip"]


@dataclass(frozen=True)
class CheckResult:
    name: str
    status: Status
    detail: str
    fix: str = ""

    def line(self) -> str:
        text = f"{self.status.upper():4} {self.name}: {self.detail}"
        return f"{text} -- fix: {self.fix}" if self.status == "fail" and self.fix else text


def passed(name: str, detail: str) -> CheckResult:
    return CheckResult(name, "pass", detail)


def failed(name: str, detail: str, fix: str) -> CheckResult:
    return CheckResult(name, "fail", detail, fix)


def skipped(name: str, why: str) -> CheckResult:
    return CheckResult(name, "skip", why)

"""Earlier revisions of a rendered bundle, kept in the bundle (DIR/.revisions/<n>/) so that a render, or a rollout of
the autoscaler, can be undone: every write over a bundle first keeps the one it replaces, and a rollback puts a kept
one back, keeping the one it replaces too. The deployment's secrets and the control plane's backend table are no part
of a revision: they stay as they are, whatever revision the files come from."""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from ascend_pd.atomic import write_atomic
from ascend_pd.deploy.io import BUNDLE_DEPLOYMENT
from ascend_pd.errors import InputError
from ascend_pd.render.bundle_secrets import SECRET_MANIFEST
from ascend_pd.render.k8s import TABLE_MANIFEST

REVISIONS_DIR = ".revisions"
KEPT_REVISIONS = 10  # the oldest goes when an eleventh is kept: a rollout writes one per step
RECORD = ".revision.json"  # in each revision: when and why it was kept

# What render writes: the deployment and its cluster's copy with their schemas, the README, the launchers, rank
# tables and manifests.
# Not the Secret manifest (its secrets are kept as they are) nor the backend table's ConfigMap, which the autoscaler
# owns (autoscale/stores.py); neither are logs, pid files, the autoscaler's lock and log, nor revisions.
_BUNDLE_GLOBS = ("*.yaml", "*.schema.json", "*.sh", "README.md", "ranktables/*.json", "k8s/*.yaml")
KEPT_AS_THEY_ARE = (SECRET_MANIFEST, f"k8s/{TABLE_MANIFEST}")


@dataclass(frozen=True)
class BundleFile:
    data: bytes
    mode: int


def bundle_files(bundle: Path) -> dict[str, BundleFile]:
    """The bundle's files in `bundle`, by path relative to it."""
    found = {}
    for pattern in _BUNDLE_GLOBS:
        for path in bundle.glob(pattern):
            relative = path.relative_to(bundle).as_posix()
            if path.is_file() and relative not in KEPT_AS_THEY_ARE:
                found[relative] = BundleFile(path.read_bytes(), path.stat().st_mode & 0o777)
    return dict(sorted(found.items()))


@dataclass(frozen=True)
class Revision:
    number: int
    path: Path
    saved_at: float  # seconds since the epoch
    reason: str  # what replaced it: "render" or "rollback"

    def files(self) -> dict[str, BundleFile]:
        found = {}
        for path in sorted(self.path.rglob("*")):
            relative = path.relative_to(self.path).as_posix()
            if path.is_file() and relative != RECORD:
                found[relative] = BundleFile(path.read_bytes(), path.stat().st_mode & 0o777)
        return found


def revisions(bundle: Path) -> list[Revision]:
    """The kept revisions, oldest first."""
    kept = []
    root = bundle / REVISIONS_DIR
    for path in root.iterdir() if root.is_dir() else ():
        if path.name.isdigit() and (path / RECORD).is_file():
            record = json.loads((path / RECORD).read_text(encoding="utf-8"))
            kept.append(Revision(int(path.name), path, record["saved_at"], record["reason"]))
    return sorted(kept, key=lambda r: r.number)


def keep_revision(bundle: Path, reason: str, incoming: dict[str, str] | None = None) -> Revision | None:
    """Keep the bundle now in `bundle` as the next revision, before `incoming` (relative path -> text) is written
    over it; None when there is no bundle yet, or when writing `incoming` would change none of its files. A revision
    appears whole or not at all (it is written aside, then renamed into place); the oldest beyond KEPT_REVISIONS go."""
    current = bundle_files(bundle)
    if BUNDLE_DEPLOYMENT not in current:
        return None
    if incoming is not None and all(k in current and current[k].data == v.encode()
                                    for k, v in incoming.items() if k not in KEPT_AS_THEY_ARE):
        return None
    root = bundle / REVISIONS_DIR
    root.mkdir(exist_ok=True)
    kept = revisions(bundle)
    number = kept[-1].number + 1 if kept else 1
    aside = root / f".saving-{number}"
    shutil.rmtree(aside, ignore_errors=True)  # left by a write that was cut short
    for relative, file in current.items():  # plain writes: the rename below is what makes the revision appear
        (aside / relative).parent.mkdir(parents=True, exist_ok=True)
        (aside / relative).write_bytes(file.data)
        (aside / relative).chmod(file.mode)
    saved_at = time.time()
    (aside / RECORD).write_text(json.dumps({"saved_at": saved_at, "reason": reason}) + "\n", encoding="utf-8")
    os.rename(aside, root / str(number))
    for old in kept[:max(0, len(kept) + 1 - KEPT_REVISIONS)]:
        shutil.rmtree(old.path)
    return Revision(number, root / str(number), saved_at, reason)


@dataclass(frozen=True)
class Restored:
    restored: Revision  # the revision whose files the bundle now has
    saved: Revision  # the bundle as it was before, kept as a revision: roll back to it to undo
    written: list[str]  # files put back (changed or missing)
    removed: list[str]  # files the restored revision did not have


def check_bundle(bundle: Path) -> None:
    """InputError unless `bundle` is a directory holding a rendered bundle."""
    fix = "give the directory `ascend-pd render --out` wrote"
    if not bundle.is_dir():
        raise InputError("no such directory", file=str(bundle), field="DIR", fix=fix)
    if not (bundle / BUNDLE_DEPLOYMENT).is_file():
        raise InputError(f"holds no rendered bundle (no {BUNDLE_DEPLOYMENT})", file=str(bundle), field="DIR", fix=fix)


def chosen_revision(bundle: Path, number: int | None) -> Revision:
    """Revision `number` of the bundle, or its newest; InputError naming the ones kept when there is none such."""
    check_bundle(bundle)
    kept = revisions(bundle)
    if not kept:
        raise InputError("has no earlier revision to go back to", file=str(bundle), field="DIR",
                         fix="render keeps the bundle it replaces: there is one after the second render into DIR")
    if number is None:
        return kept[-1]
    found = next((r for r in kept if r.number == number), None)
    if found is None:
        raise InputError(f"has no revision {number}", file=str(bundle), field="--to",
                         fix="choose one of " + ", ".join(str(r.number) for r in kept) + " (ascend-pd rollback DIR "
                             "--list)")
    return found


def restore_revision(bundle: Path, number: int | None = None) -> Restored:
    """Put revision `number` (the newest by default) back in place, each file replaced whole, and remove the files it
    did not have; the bundle it replaces becomes the newest revision."""
    target = chosen_revision(bundle, number)
    wanted = target.files()  # read first: keeping the current bundle may prune the oldest revision
    before = bundle_files(bundle)
    saved = keep_revision(bundle, "rollback")
    written, removed = [], []
    for relative, file in wanted.items():
        path = bundle / relative
        if before.get(relative) != file:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, file.data, mode=file.mode)
            written.append(relative)
    for relative in sorted(set(before) - set(wanted)):
        (bundle / relative).unlink()
        removed.append(relative)
    return Restored(target, saved, written, removed)

"""Writing files and folders so that a reader never sees them half-written.

- :func:`atomic_file` yields a temporary sibling path (``.NAME.tmp-PID``); when the block ends
  without an exception it replaces ``path`` in one rename, otherwise it is removed. A reader
  sees the old file or the new one, never a mix or a truncated one.
- :func:`atomic_folder` does the same for a folder: everything is written into a temporary
  sibling folder, which, complete, takes the place of the old one (the old one is moved aside
  first and removed after: between the two renames the folder is briefly absent, which readers
  report as "no run folder", never a mixed one). The next writer of the same folder cleans up
  after one that was killed: it puts an old folder moved aside back, and removes temporary ones.
- :func:`check_output` checks, before any work, that an output location can be written: a
  simulation is not run only to fail at its last step.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from specmd_sim.errors import SpecmdError


def _sibling(path: Path, tag: str) -> Path:
    return path.with_name(f".{path.name}.{tag}-{os.getpid()}")


@contextmanager
def atomic_file(path: Path) -> Iterator[Path]:
    """A temporary path to write ``path``'s new content to; renamed into place on success."""
    path = Path(path)
    tmp = _sibling(path, "tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_text(path: Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    with atomic_file(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


@contextmanager
def atomic_folder(path: Path) -> Iterator[Path]:
    """A temporary folder to fill; on success it replaces ``path`` (a folder, or nothing)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _recover(path)
    tmp = _sibling(path, "tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
        old = _sibling(path, "old")
        if path.exists():
            os.replace(path, old)
        os.replace(tmp, path)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _recover(path: Path) -> None:
    """Clean up after a writer that was killed: put back an old folder it had moved aside but
    not yet replaced, and remove its temporary folders (those of processes no longer alive)."""
    for stale in path.parent.glob(f".{path.name}.*-*"):
        tag, _, pid = stale.name.rpartition("-")
        if not pid.isdigit() or _alive(int(pid)):
            continue
        if tag.endswith(".old") and not path.exists():
            os.replace(stale, path)
        else:
            shutil.rmtree(stale, ignore_errors=True)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def check_output(path: Path, what: str, *, folder: bool) -> None:
    """One clear line, before any work, if ``path`` cannot be written as a file or a folder."""
    path = Path(path)
    if folder and path.exists() and not path.is_dir():
        raise SpecmdError(f"{what}: expected a folder to write into, got the file {str(path)!r}")
    if not folder and path.is_dir():
        raise SpecmdError(f"{what}: expected a file path to write, got the folder {str(path)!r}")
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise SpecmdError(
            f"{what}: expected a location under a folder, got {str(path)!r} ({parent} is a file)"
        )
    if not os.access(parent, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise SpecmdError(f"{what}: expected a writable location, got {str(path)!r}")

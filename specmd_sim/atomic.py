"""Writing files and folders so that a reader never sees them half-written, and a write that
fails is one line.

- :func:`atomic_file` yields a temporary sibling path (``.NAME.tmp-PID``); when the block ends
  without an exception it replaces ``path`` in one rename, otherwise it is removed. A reader
  sees the old file or the new one, never a mix or a truncated one.
- :func:`atomic_folder` does the same for a folder: everything is written into a temporary
  sibling folder, which, complete, takes the place of the old one (the old one is moved aside
  first and removed after: between the two renames the folder is briefly absent, which readers
  report as "no run folder", never a mixed one). The next writer of the same folder cleans up
  after one that was killed: it puts an old folder moved aside back, and removes temporary ones.
- :func:`check_output` checks, before any work, that an output location can be written: a
  simulation is not run only to fail at its last step. Besides the permissions it tries the
  write itself (a temporary folder made and removed where the output goes): a permission check
  passes for root where the write then fails (under ``/proc``, on a read-only mount).
- Both writers make the missing folders above ``path``, and every failure of a write, theirs or
  one in their block (any ``OSError``), is one line (:func:`write_error`) naming the output,
  what was expected and the system's reason. :func:`writing` and :func:`make_folder` do the
  same for the few writes that are not replaced whole (a lock file, a work folder).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from specmd_sim.errors import SpecmdError

OUTPUT = "output"
"""What an output is called in an error where the caller names it no better."""


def _sibling(path: Path, tag: str) -> Path:
    return path.with_name(f".{path.name}.{tag}-{os.getpid()}")


def reason(err: OSError) -> str:
    """An ``OSError`` in a few words: the system's reason and the path it names, if any."""
    text = err.strerror or str(err) or type(err).__name__
    return text if err.filename is None else f"{text}: {str(err.filename)!r}"


def write_error(what: str, path: Path, err: OSError, *, folder: bool = False) -> SpecmdError:
    """The line for a write of ``path`` (a file, or a ``folder``) that failed with ``err``."""
    expected = "a folder that can be created" if folder else "a file that can be written"
    return SpecmdError(f"{what}: expected {expected}, got {str(path)!r} ({reason(err)})")


@contextmanager
def writing(path: Path, what: str = OUTPUT, *, folder: bool = False) -> Iterator[None]:
    """A block that writes ``path``: an ``OSError`` in it is one line (:func:`write_error`)."""
    try:
        yield
    except OSError as err:
        raise write_error(what, Path(path), err, folder=folder) from None


def make_folder(path: Path, what: str = OUTPUT) -> Path:
    """``path`` as a folder, made with its parents where missing; one line if it cannot be."""
    path = Path(path)
    with writing(path, what, folder=True):
        path.mkdir(parents=True, exist_ok=True)
    return path


@contextmanager
def atomic_file(path: Path, what: str = OUTPUT) -> Iterator[Path]:
    """A temporary path to write ``path``'s new content to; renamed into place on success.
    ``what`` names the output in the line a failed write gives."""
    path = Path(path)
    tmp = _sibling(path, "tmp")
    try:
        with writing(path, what):
            path.parent.mkdir(parents=True, exist_ok=True)
            yield tmp
            os.replace(tmp, path)
    finally:
        with contextlib.suppress(OSError):  # (there is none where its folder could not be made)
            tmp.unlink(missing_ok=True)


def write_text(path: Path, text: str, what: str = OUTPUT) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    with atomic_file(path, what) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


@contextmanager
def atomic_folder(path: Path, what: str = OUTPUT) -> Iterator[Path]:
    """A temporary folder to fill; on success it replaces ``path`` (a folder, or nothing).
    ``what`` names the output in the line a failed write gives."""
    path = Path(path)
    tmp = _sibling(path, "tmp")
    try:
        with writing(path, what, folder=True):
            path.parent.mkdir(parents=True, exist_ok=True)
            _recover(path)
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir()
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
    try:
        _check_output(path, what, folder)
    except OSError as err:  # (a name longer than the file system holds, say)
        raise write_error(what, path, OSError(err.errno, err.strerror), folder=folder) from None


def _check_output(path: Path, what: str, folder: bool) -> None:
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
    try:  # the write itself: permissions say yes to root where the write then fails
        os.rmdir(tempfile.mkdtemp(prefix=".specmd-check-", dir=parent))
    except OSError as err:  # (the name of the folder tried would only confuse)
        raise write_error(what, path, OSError(err.errno, err.strerror), folder=folder) from None

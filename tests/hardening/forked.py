"""Run a ``specmd`` command or an API call in a forked copy of the test process.

A fork starts at once (everything is imported already), and it bounds what a bad input can do
to the test run: the child is killed at a deadline (a hang fails its case instead of blocking
the suite), its address space is capped (an alias bomb that expands fails its case instead of
exhausting the machine), and whatever it leaves behind (threads, registries, the working
folder) dies with it. stdout and stderr go, line-buffered, to one file, so the output is read
in the order a user sees it.

The command runs through :func:`specmd_sim.cli.main`, the console entry point itself: the place
that turns a :class:`~specmd_sim.errors.SpecmdError` into ``error: ...`` and exit code 2.
"""

from __future__ import annotations

import contextlib
import functools
import os
import pickle
import re
import resource
import select
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEADLINE_S = 10.0  # a bad input is refused within this; a tiny run takes about 1.5 s
EXTRA_MEMORY = 4 * 2**30  # address space a child may add to what the parent maps
KILLED = None  # Outcome.code of a child killed at the deadline
_ERROR_WORD = re.compile(r"error", re.IGNORECASE)


@dataclass(frozen=True)
class Outcome:
    """What a forked run gave: its exit code (None: killed at the deadline), its output and,
    for an API call, what the call returned or raised."""

    code: int | None
    output: str
    seconds: float
    payload: Any = None

    def tail(self, limit: int = 600) -> str:
        text = self.output.strip()
        return text if len(text) <= limit else "..." + text[-limit:]


def _virtual_size() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)  # what the interpreter does with SystemExit("text")
    return 1


def fork(body: Callable[[], Any], *, cwd: Path | None = None, deadline: float = DEADLINE_S,
         syspath: Path | None = None) -> Outcome:  # fmt: skip
    """Run ``body()`` in a forked child; its return value (or exception) is the payload.

    ``body`` may raise SystemExit (a command's exit code); any other exception is printed as
    the interpreter prints an uncaught one (a traceback, exit code 1) and is also the payload.
    """
    with tempfile.TemporaryDirectory(prefix="specmd-fork-") as tmp:
        out_path, payload_path = os.path.join(tmp, "out"), os.path.join(tmp, "payload")
        sys.stdout.flush()
        sys.stderr.flush()
        started = time.monotonic()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            _child(body, out_path, payload_path, cwd, syspath)
        status = _wait(pid, started + deadline)
        seconds = time.monotonic() - started
        output = Path(out_path).read_text(encoding="utf-8", errors="backslashreplace") \
            if os.path.exists(out_path) else ""  # fmt: skip
        payload = None
        if os.path.exists(payload_path):
            with open(payload_path, "rb") as handle:
                payload = pickle.load(handle)
    if status is None:
        return Outcome(KILLED, output, seconds, payload)
    code = os.waitstatus_to_exitcode(status)
    return Outcome(code, output, seconds, payload)


def _wait(pid: int, until: float) -> int | None:
    """The child's wait status, or None after killing it at ``until``."""
    pidfd = os.pidfd_open(pid) if hasattr(os, "pidfd_open") else None
    try:
        pause = 0.002
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return status
            left = until - time.monotonic()
            if left <= 0:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)  # the child and any workers it started
                os.waitpid(pid, 0)
                return None
            if pidfd is not None:  # readable when the child ends
                select.select([pidfd], [], [], min(left, 1.0))
            else:
                time.sleep(min(pause, left))
                pause = min(pause * 1.5, 0.05)
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _child(body: Callable[[], Any], out_path: str, payload_path: str, cwd: Path | None,
           syspath: Path | None) -> None:  # fmt: skip
    code = 70
    try:
        os.setpgid(0, 0)
        fd = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        sys.stdin = open(0, closefd=False)  # noqa: SIM115
        sys.stdout = open(1, "w", closefd=False, encoding="utf-8", buffering=1)  # noqa: SIM115
        sys.stderr = open(2, "w", closefd=False, encoding="utf-8", buffering=1)  # noqa: SIM115
        cap = _virtual_size() + EXTRA_MEMORY
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
        if cwd is not None:
            os.chdir(cwd)
        if syspath is not None:
            sys.path.insert(0, str(syspath))
        try:
            payload: Any = ("returned", _describe(body()))
            code = 0
        except SystemExit as exc:
            payload = ("exit", exc.code)
            code = _exit_code(exc.code)
        except BaseException as exc:  # what an uncaught exception does to the interpreter
            traceback.print_exc()
            payload = ("raised", _exception(exc))
            code = 1
        try:
            with open(payload_path, "wb") as handle:
                pickle.dump(payload, handle)
        except Exception:
            pass
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _describe(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 200 else text[:197] + "..."


@dataclass(frozen=True)
class Raised:
    """An exception raised in the child, as plain data."""

    type_name: str  # module.QualName
    is_specmd_error: bool
    message: str


def _exception(exc: BaseException) -> Raised:
    from specmd_sim.errors import SpecmdError

    kind = type(exc)
    try:
        message = str(exc)
    except Exception as inner:  # an exception whose str() fails is a bug of its own
        message = f"<str() failed: {inner!r}>"
    return Raised(f"{kind.__module__}.{kind.__qualname__}", isinstance(exc, SpecmdError), message)


# --- the two ways a case runs ----------------------------------------------------------------


@functools.cache
def _click_command() -> Any:
    """The click command typer builds from the app (about 60 ms, on every call of the app)."""
    import typer.main

    from specmd_sim.cli import app

    return typer.main.get_command(app)


def cli(*args: object, cwd: Path | None = None, deadline: float = DEADLINE_S,
        syspath: Path | None = None) -> Outcome:  # fmt: skip
    """``specmd ARGS`` through the console entry point, in a fork.

    The child reuses the click command built here once (typer would build the same one
    again), and otherwise runs :func:`specmd_sim.cli.main` as the ``specmd`` script does.
    """
    command = _click_command()

    def body() -> None:
        import typer.main

        from specmd_sim.cli import main

        typer.main.get_command = lambda _app: command
        sys.argv = ["specmd", *(str(a) for a in args)]
        main()

    return fork(body, cwd=cwd, deadline=deadline, syspath=syspath)


def api(call: Callable[[], Any], *, cwd: Path | None = None, deadline: float = DEADLINE_S,
        syspath: Path | None = None) -> Outcome:  # fmt: skip
    """``call()`` in a fork; ``payload`` says what it returned or raised."""
    return fork(call, cwd=cwd, deadline=deadline, syspath=syspath)


# --- the contract ----------------------------------------------------------------------------


def user_error_problems(outcome: Outcome, fragments: tuple[str, ...] = ()) -> list[str]:
    """What is wrong with ``outcome`` as the answer to a bad input: exit code 2 and one line
    ``error: <input>: <field>: expected ..., got ...`` naming each of ``fragments``, no
    traceback, within the deadline. An empty list: nothing."""
    problems: list[str] = []
    if outcome.code is KILLED:
        return [f"no answer within {outcome.seconds:.0f} s (killed: a hang)"]
    text = outcome.output
    if "Traceback" in text:
        problems.append("a Python traceback")
    if outcome.code != 2:
        problems.append(f"exit code {outcome.code}, expected 2")
    lines = [line for line in text.splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    if not last.startswith("error: "):
        problems.append("the last line is not 'error: ...'")
    mentioning = [line for line in lines if _ERROR_WORD.search(line)]
    if len(mentioning) != 1:
        problems.append(f"{len(mentioning)} lines mention an error, expected exactly 1")
    missing = [f for f in fragments if f not in last]
    if missing and last.startswith("error: "):
        problems.append(f"the error line does not name {missing}")
    return problems


def api_error_problems(outcome: Outcome, fragments: tuple[str, ...] = ()) -> list[str]:
    """What is wrong with ``outcome`` as an API call given a bad input: it must raise
    SpecmdError whose message is one line naming each of ``fragments``, within the deadline."""
    if outcome.code is KILLED:
        return [f"no answer within {outcome.seconds:.0f} s (killed: a hang)"]
    kind, value = outcome.payload if outcome.payload else ("none", None)
    if kind == "returned":
        return [f"returned {value} instead of raising SpecmdError"]
    if kind != "raised":
        return [f"ended with {kind} {value!r} instead of raising SpecmdError"]
    problems = []
    if not value.is_specmd_error:
        problems.append(f"raised {value.type_name}, expected SpecmdError")
    if "\n" in value.message.strip():
        problems.append("a message of several lines")
    missing = [f for f in fragments if f not in value.message]
    if missing:
        problems.append(f"the message does not name {missing}")
    return problems


def describe(outcome: Outcome) -> str:
    """The outcome in a failure message: exit code, time and the last lines of output."""
    lines = [line for line in outcome.output.splitlines() if line.strip()]
    text = " | ".join(lines[-3:])
    if len(text) > 400:
        text = text[:397] + "..."
    if outcome.payload and outcome.payload[0] == "raised" and not lines:
        raised = outcome.payload[1]
        text = f"raised {raised.type_name}: {raised.message[:300]}"
    return f"exit {outcome.code} after {outcome.seconds:.1f} s: {text}"


# --- folders that must survive a failed command ----------------------------------------------


def snapshot(path: Path) -> dict[str, bytes | None]:
    """Every file under ``path`` (or ``path`` itself) by relative name, with its bytes; folders
    as None, so an added or removed empty folder counts too."""
    path = Path(path)
    if not path.exists():
        return {}
    if path.is_file():
        return {".": path.read_bytes()}
    out: dict[str, bytes | None] = {".": None}
    for item in sorted(path.rglob("*")):
        out[str(item.relative_to(path))] = item.read_bytes() if item.is_file() else None
    return out


def restore(path: Path, saved: dict[str, bytes | None]) -> None:
    """Put ``path`` back as ``saved`` (after a case that changed it, so that the next case
    starts from the same folder)."""
    import shutil

    path = Path(path)
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
    if "." in saved and saved["."] is not None:
        path.write_bytes(saved["."])
        return
    for name, data in saved.items():
        target = path if name == "." else path / name
        if data is None:
            target.mkdir(parents=True, exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)

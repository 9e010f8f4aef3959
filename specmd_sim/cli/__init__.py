"""The ``specmd`` command line: a thin typer layer over the API.

Errors a user can cause print one line ``error: ...`` on stderr and exit with code 2.
Each module of this package registers its commands on :data:`app`.
"""

from __future__ import annotations

import gc
import sys

import typer

from specmd_sim.cli import (  # noqa: F401  (they register their commands)
    catalog,
    mrc,
    real,
    record,
    report,
    reproduce,
    run,
    sweep,
    trace,
    validate,
)
from specmd_sim.cli.app import app
from specmd_sim.errors import SpecmdError

__all__ = ["app", "main", "process_main"]

# click's UsageError (a bad option value, an unknown option or command), as the click that typer
# uses (typer >= 0.2x vendors its own) defines it: the base of BadParameter of that name
_USAGE_ERROR: type[Exception] = next(
    c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError"
)


def main() -> None:
    """Entry point: run the app; a user error (ours, or a usage error of an option) is one line
    and exit code 2, an interrupt says so and exits 130."""
    try:
        code = app(standalone_mode=False)
    except SpecmdError as exc:
        _fail(str(exc))
    except _USAGE_ERROR as exc:
        ctx = getattr(exc, "ctx", None)
        hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
        _fail(exc.format_message() + hint)  # type: ignore[attr-defined]
    except (KeyboardInterrupt, typer.Abort):  # outside a command, or while typer starts one
        code = 130
    if code == 130:
        print("interrupted", file=sys.stderr)
    raise SystemExit(code if isinstance(code, int) else 0)


def process_main() -> None:
    """The ``specmd`` process (the console script, ``python -m specmd_sim``): :func:`main`, and
    then, as the process ends, its objects frozen, so that the cycle collection at exit does not
    walk every object only to free what the exit frees anyway (~0.05 s of a replay). Callers in
    a longer-lived process call :func:`main`, which leaves the collector as it was."""
    try:
        main()
    finally:
        gc.freeze()


def _fail(message: str) -> None:
    """Print ``error: message`` as one line (a line break in a value is shown escaped)."""
    text = message.replace("\r", "\\r").replace("\n", "\\n")
    print(f"error: {text}", file=sys.stderr)
    raise SystemExit(2)

"""The ``specmd`` command line: a thin typer layer over the API.

Errors a user can cause print one line ``error: ...`` on stderr and exit with code 2.
Each module of this package registers its commands on :data:`app`.
"""

from __future__ import annotations

import sys

from specmd_sim.cli import (  # noqa: F401  (they register their commands)
    catalog,
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

__all__ = ["app", "main"]


def main() -> None:
    """Entry point: run the app, turning user errors into one line and exit code 2."""
    try:
        app()
    except SpecmdError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    except KeyboardInterrupt:  # outside a command (typer turns one inside into exit 130)
        print("interrupted", file=sys.stderr)
        raise SystemExit(130) from None
    except SystemExit as exc:
        if exc.code == 130:
            print("interrupted", file=sys.stderr)
        raise

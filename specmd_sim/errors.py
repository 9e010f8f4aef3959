"""User-facing errors.

Every error a user can cause (a bad YAML field, a trace with an out-of-range expert id, a cache
too small for one layer) is raised as a :class:`SpecmdError` whose message is one line naming the
input, what was expected and what was received. The CLI prints that line and exits with code 2.
"""

from __future__ import annotations

import reprlib

from pydantic import ValidationError


class SpecmdError(Exception):
    """An error caused by the user's input; its message is meant to be shown as is."""


class Notice(UserWarning):
    """Something the user should know about a run that is not an error (the engines compile
    for this machine, a page inlines a slower plotly.js): one line, which the CLI prints on
    stderr each time it is warned."""


def from_validation_error(source: str, err: ValidationError) -> SpecmdError:
    """Condense a pydantic ValidationError into one line naming field, expectation and value."""
    problems = err.errors(include_url=False)
    first = problems[0]
    loc = ".".join(str(p) for p in first["loc"])
    msg = first["msg"]
    if first["type"] == "missing":
        text = f"{source}: {loc}: required field is missing"
    elif first["type"] == "value_error":  # our own validators already name expectation and value
        text = f"{source}: {loc + ': ' if loc else ''}{msg.removeprefix('Value error, ')}"
    else:
        got = first.get("input")
        text = f"{source}: {loc}: {msg[0].lower() + msg[1:]}, got {short_repr(got)}"
    if len(problems) > 1:
        text += f" (and {len(problems) - 1} more problem{'s' if len(problems) > 2 else ''})"
    return SpecmdError(text)


def _bounded_repr() -> reprlib.Repr:
    """A repr bounded in depth and width, so that its cost does not grow with the value (a
    YAML alias bomb expands to a structure of astronomical size)."""
    r = reprlib.Repr()
    r.maxlevel = 3
    r.maxlist = r.maxtuple = r.maxdict = r.maxset = r.maxfrozenset = r.maxdeque = 6
    r.maxstring = r.maxother = r.maxlong = 60
    return r


_REPR = _bounded_repr()


def short_repr(value: object, limit: int = 60) -> str:
    """``repr(value)`` in at most ``limit`` characters, at a cost bounded whatever the value."""
    text = _REPR.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."

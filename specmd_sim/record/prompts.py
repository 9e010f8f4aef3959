"""Prompt files for the recorder: plain text (one prompt per line) or JSONL (one prompt per
line, a JSON string or an object with ``prompt`` or ``text``), and a bundled handful."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from specmd_sim.errors import SpecmdError

PROMPT_KEYS = ("prompt", "text")


def bundled_prompts() -> list[str]:
    """Eight short prompts of different kinds (code, arithmetic, prose, dialogue, lists)."""
    text = resources.files("specmd_sim.record").joinpath("prompts.jsonl").read_text("utf-8")
    return _parse_jsonl(text.splitlines(), "bundled prompts")


def read_prompts(path: str | Path) -> list[str]:
    """The prompts of a ``.jsonl`` or text file; one clear line for a bad file."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecmdError(
            f"prompts: expected a readable UTF-8 file, got {str(path)!r} ({exc})"
        ) from None
    if path.suffix == ".jsonl":
        prompts = _parse_jsonl(lines, str(path))
    else:
        prompts = [line for line in lines if line.strip()]
    if not prompts:
        raise SpecmdError(f"prompts: {path}: expected at least one prompt, got none")
    return prompts


def _parse_jsonl(lines: list[str], source: str) -> list[str]:
    prompts = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise SpecmdError(
                f"prompts: {source}, line {number}: expected JSON, got {exc}"
            ) from None
        if isinstance(record, dict):
            record = next((record[k] for k in PROMPT_KEYS if k in record), None)
        if not isinstance(record, str) or not record:
            raise SpecmdError(
                f"prompts: {source}, line {number}: expected a non-empty string or an object "
                f"with {' or '.join(PROMPT_KEYS)}, got {line.strip()[:60]!r}"
            )
        prompts.append(record)
    return prompts

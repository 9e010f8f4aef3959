from __future__ import annotations

from pathlib import Path

from specmd_sim.policies.docs import render

DOC = Path(__file__).resolve().parents[2] / "docs" / "policies.md"


def test_policies_doc_is_current() -> None:
    """docs/policies.md is generated: regenerate with `specmd policies docs > docs/policies.md`."""
    assert DOC.read_text() == render()


def test_every_plugin_is_documented_with_its_rule() -> None:
    text = render()
    for kind in ("least-stale", "static-hot", "belady-bypass", "score-threshold", "transition",
                 "substitute"):  # fmt: skip
        assert f"### `{kind}`" in text
    assert "| `eviction.order` | `'fifo'` |" in text

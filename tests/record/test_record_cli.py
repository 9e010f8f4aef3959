"""From a config.json to a recorded trace, to a run on it: the bring-your-own-model path, in
process (the ``record`` extra; CI installs it and sets ``SPECMD_REQUIRE_RECORD=1``)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

if os.environ.get("SPECMD_REQUIRE_RECORD"):
    import transformers
else:
    transformers = pytest.importorskip("transformers")

from specmd_sim.cli import app
from specmd_sim.errors import SpecmdError
from specmd_sim.models import load_model
from specmd_sim.traces import load_trace

RUNNER = CliRunner()


def invoke(*args: str) -> str:
    result = RUNNER.invoke(app, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("record") / "tiny-qwen3"
    folder.mkdir()
    config = transformers.Qwen3MoeConfig(
        vocab_size=96, hidden_size=32, intermediate_size=48, moe_intermediate_size=16,
        num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
        num_experts=16, num_experts_per_tok=2, eos_token_id=None,
    )  # fmt: skip
    (folder / "config.json").write_text(config.to_json_string(), encoding="utf-8")
    prompts = folder / "prompts.txt"
    prompts.write_text("first prompt here\n\nsecond, a little longer, prompt\n", encoding="utf-8")
    out = folder / "tiny.npz"
    invoke(
        "trace", "record", "--model", str(folder / "config.json"), "--random-weights",
        "--prompts", str(prompts), "--out", str(out), "--max-new-tokens", "6",
        "--lookahead", "2",
    )  # fmt: skip
    return out


def test_record_writes_a_trace_and_its_model_spec(recorded: Path) -> None:
    trace = load_trace(recorded)
    assert (trace.num_layers, trace.num_experts, trace.top_k, trace.lookahead) == (4, 16, 2, 2)
    assert np.unique(trace.request).tolist() == [0, 1]
    assert int((trace.phase == 1).sum()) == 12  # 6 decode tokens per request
    spec = load_model(str(recorded.with_name("tiny.model.yaml")))
    assert spec.id == trace.model == "tiny-qwen3"
    assert (spec.moe_layers, spec.num_experts, spec.top_k, spec.hidden_size) == (4, 16, 2, 32)
    assert trace.meta["model_spec"] == yaml.safe_load(
        recorded.with_name("tiny.model.yaml").read_text()
    )


def test_a_run_on_the_recorded_trace_replays_its_own_predictions(
    recorded: Path, tmp_path: Path
) -> None:
    out = invoke(
        "run", "--trace", str(recorded), "--cache", "16", "--set", "predictor.kind=trace",
        "--set", "prefetch.lookahead=2", "--out", str(tmp_path / "run"), "--json",
    )  # fmt: skip
    metrics = json.loads(out)
    assert metrics["tpot_s"] > 0
    inputs = json.loads((tmp_path / "run" / "result.json").read_text())["inputs"]
    assert inputs["expert_bytes"] == 3 * 32 * 16 * 4  # fp32 experts of the tiny model


def test_record_errors_are_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps({"model_type": "llama"}), encoding="utf-8")
    with pytest.raises(SpecmdError, match="model_type expected one of mixtral, olmoe"):
        RUNNER.invoke(
            app,
            ["trace", "record", "--model", str(bad), "--random-weights", "--out", "x.npz"],
            catch_exceptions=False,
        )


def test_a_config_json_without_random_weights_is_refused_at_once(recorded: Path) -> None:
    """A config.json has no weights: without --random-weights the line says so at once, where
    from_pretrained took it for a hub id and retried the network for most of a minute."""
    config = recorded.parent / "config.json"
    prompts = recorded.parent / "prompts.txt"
    said = r"got the file .*config\.json'; a config\.json is recorded with --random-weights"
    out = str(recorded.parent / "x.npz")
    args = ["trace", "record", "--model", str(config), "--prompts", str(prompts), "--out", out]
    with pytest.raises(SpecmdError, match=said):
        RUNNER.invoke(app, args, catch_exceptions=False)

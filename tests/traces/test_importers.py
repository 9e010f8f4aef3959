"""``specmd_sim.traces.importers``: each format round-trips a known id array written in that
tool's layout; what cannot be mapped exactly is reported; bad input is one line naming the file."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from support.traces import random_trace_ids
from typer.testing import CliRunner

from specmd_sim.cli import app
from specmd_sim.cli.trace import read_table_columns
from specmd_sim.errors import SpecmdError
from specmd_sim.traces.importers import FORMATS, ImportResult, import_trace
from specmd_sim.traces.io import load_trace
from specmd_sim.traces.trace import DECODE, PREFILL

E, L, K = 8, 4, 2
TOY = {"model": "toy-moe", "num_experts": E}  # not a catalog model: the shape comes from here
SHARED = Path(__file__).resolve().parents[3] / "shared" / "traces" / "mixtral8x7b_decode.npz"


def ids_and_gates(seed: int, tokens: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = random_trace_ids(rng, tokens, L, E, K)
    gates = np.sort(rng.dirichlet(np.ones(K), size=(tokens, L)), axis=2)[..., ::-1]
    return ids, np.ascontiguousarray(gates, dtype=np.float32)


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def one_line_error(fragments: tuple[str, ...], *args: Any, **kwargs: Any) -> str:
    with pytest.raises(SpecmdError) as info:
        import_trace(*args, **kwargs)
    message = str(info.value)
    assert "\n" not in message, message
    for fragment in fragments:
        assert fragment in message, message
    return message


def test_the_registry_names_every_format() -> None:
    assert list(FORMATS) == ["vllm", "sglang", "speculative-moe", "vllm-moe-logger", "long"]
    message = one_line_error(("--format", "vllm, sglang, speculative-moe"), "x", "nope", **TOY)
    assert message.endswith("got 'nope'")


# --- vllm ----------------------------------------------------------------------------------


def test_vllm_folder_of_npy_files_is_one_request_per_file(tmp_path: Path) -> None:
    ids, _ = ids_and_gates(0, 15)
    lengths = [6, 4, 5]
    parts = np.split(ids, np.cumsum(lengths)[:-1])
    for i, part in enumerate(parts):  # vLLM's CompletionOutput.routed_experts, saved per request
        np.save(tmp_path / f"req{i}.npy", part.astype(np.int32))
    (tmp_path / "notes.txt").write_text("not routing")
    result = import_trace(tmp_path, "vllm", prefill_tokens=2, **TOY)
    t = result.trace
    np.testing.assert_array_equal(t.experts, ids)
    assert t.gates is None
    np.testing.assert_array_equal(t.request, np.repeat([0, 1, 2], lengths))
    phase = np.concatenate([np.where(np.arange(n) < 2, PREFILL, DECODE) for n in lengths])
    np.testing.assert_array_equal(t.phase, phase)
    assert t.meta["request_ids"] == ["req0", "req1", "req2"]
    assert (t.meta["importer"], t.meta["source"], t.num_experts) == ("vllm", tmp_path.name, E)
    assert result.report == ["ignored 1 other files in the folder: notes.txt"]


def _vllm_npz_members(path: Path, parts: list[np.ndarray]) -> Path:
    np.savez(path / "run.npz", **{f"r{i}": p for i, p in enumerate(parts)})
    return path / "run.npz"


def _vllm_json_list(path: Path, parts: list[np.ndarray]) -> Path:
    (path / "run.json").write_text(json.dumps([p.tolist() for p in parts]))
    return path / "run.json"


def _vllm_json_records(path: Path, parts: list[np.ndarray]) -> Path:
    records = {f"r{i}": {"routed_experts": p.tolist(), "num_prompt_tokens": 1} for i, p in
               enumerate(parts)}  # fmt: skip
    (path / "run.json").write_text(json.dumps(records))
    return path / "run.json"


@pytest.mark.parametrize(
    ("writer", "prefill"),
    [(_vllm_npz_members, 0), (_vllm_json_list, 0), (_vllm_json_records, 1)],
    ids=["npz-members", "json-list", "json-records"],
)
def test_vllm_archive_and_json_layouts(tmp_path: Path, writer: Any, prefill: int) -> None:
    ids, _ = ids_and_gates(1, 9)
    parts = [ids[:5], ids[5:]]
    t = import_trace(writer(tmp_path, parts), "vllm", **TOY).trace
    np.testing.assert_array_equal(t.experts, ids)
    np.testing.assert_array_equal(t.request, [0] * 5 + [1] * 4)
    first, second = (
        [PREFILL] * prefill + [DECODE] * (5 - prefill),
        [PREFILL] * prefill + [DECODE] * (4 - prefill),
    )
    assert t.phase.tolist() == first + second
    assert t.meta["request_ids"] == (["0", "1"] if writer is _vllm_json_list else ["r0", "r1"])


def test_vllm_single_request_files(tmp_path: Path) -> None:
    ids, _ = ids_and_gates(2, 6)
    np.savez(tmp_path / "a.npz", routed_experts=ids[:3], num_prompt_tokens=np.int64(2))
    (tmp_path / "b.json").write_text(json.dumps(ids[3:].tolist()))  # one [T][L][k] list
    t = import_trace(tmp_path, "vllm", **TOY).trace
    np.testing.assert_array_equal(t.experts, ids)
    assert t.meta["request_ids"] == ["a", "b"]
    assert t.phase.tolist() == [PREFILL, PREFILL, DECODE, DECODE, DECODE, DECODE]


@pytest.mark.parametrize(
    ("content", "fragments"),
    [
        ([[[1, 8]]], ("expert ids in [0, 7]", "8 at token 0, layer 0, slot 1")),
        ([[[3, 3]]], ("distinct expert ids", "[3, 3] at token 0, layer 0")),
        ([[1, 2]], ("3 dimensions",)),
        ({"r": {"routed_experts": [[[1, 2]]], "num_prompt_tokens": 5}}, ("at most 1",)),
        ({"r": {"ids": []}}, ("a key 'routed_experts'",)),
    ],
    ids=["out-of-range", "duplicate", "not-3-d", "prompt-too-long", "no-routed-experts"],
)
def test_vllm_errors(tmp_path: Path, content: Any, fragments: tuple[str, ...]) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(content))
    one_line_error((f"vllm {path}", *fragments), path, "vllm", **TOY)


def test_vllm_inconsistent_top_k_across_requests(tmp_path: Path) -> None:
    np.save(tmp_path / "a.npy", np.array([[[0, 1]]]))
    np.save(tmp_path / "b.npy", np.array([[[0, 1, 2]]]))
    one_line_error(
        (f"vllm {tmp_path / 'b.npy'}", "top_k: expected 2 (like", "got 3"), tmp_path, "vllm", **TOY
    )


# --- sglang --------------------------------------------------------------------------------


def b64(ids: np.ndarray, dtype: str = "<i4") -> str:
    return base64.b64encode(ids.astype(dtype).tobytes()).decode("ascii")


def test_sglang_records_round_trip(tmp_path: Path) -> None:
    ids, _ = ids_and_gates(3, 10)
    records = [
        {"rid": "a", "routed_experts": b64(ids[:6]), "num_layers": L, "top_k": K},
        {  # a /generate response: the payload in meta_info, the shape from the options
            "text": "...",
            "meta_info": {"id": "b", "routed_experts": b64(ids[6:]), "prompt_tokens": 3},
        },
        {"rid": "c", "meta_info": {"finish_reason": "abort"}},  # no routed_experts
    ]
    path = write_jsonl(tmp_path / "out.jsonl", records)
    result = import_trace(path, "sglang", num_layers=L, top_k=K, **TOY)
    t = result.trace
    np.testing.assert_array_equal(t.experts, ids)
    np.testing.assert_array_equal(t.request, [0] * 6 + [1] * 4)
    assert t.phase.tolist() == [DECODE] * 6 + [PREFILL] * 3 + [DECODE]
    assert t.meta["request_ids"] == ["a", "b"]
    assert result.report == [
        "skipped 1 records without routed_experts (sent without return_routed_experts?)",
        "ignored fields: finish_reason (1 records), text (1 records)",
    ]
    as_list = tmp_path / "out.json"  # the same records as one JSON list, a narrower dtype
    records[0]["routed_experts"], records[0]["routed_experts_dtype"] = b64(ids[:6], "u1"), "uint8"
    as_list.write_text(json.dumps(records))
    again = import_trace(as_list, "sglang", num_layers=L, top_k=K, **TOY).trace
    np.testing.assert_array_equal(again.experts, ids)


@pytest.mark.parametrize(
    ("record", "options", "fragments"),
    [
        ({"routed_experts": "AAAA"}, {}, ("num_layers: expected a record key 'num_layers' or "
                                          "the option --num-layers, got neither",)),
        ({"routed_experts": b64(np.zeros(3)), "num_layers": 1, "top_k": 2}, {},
         ("a multiple of 8 bytes (int32 [tokens, 1 layers, top-2])", "got 12 bytes")),
        ({"routed_experts": "not base64!", "num_layers": 1, "top_k": 2}, {}, ("base64 text",)),
        ({"routed_experts": b64(np.array([0, 1])), "num_layers": 1, "top_k": 2}, {"top_k": 1},
         ("top_k: expected 1 (--top-k), got 2",)),
        ({"routed_experts": 5, "num_layers": 1, "top_k": 2}, {}, ("base64 text, got int",)),
    ],
    ids=["no-shape", "wrong-length", "bad-base64", "top-k-conflict", "not-text"],
)  # fmt: skip
def test_sglang_errors(
    tmp_path: Path, record: dict[str, Any], options: dict[str, Any], fragments: tuple[str, ...]
) -> None:
    path = write_jsonl(tmp_path / "out.jsonl", [record])
    one_line_error((f"sglang {path} line 1:", *fragments), path, "sglang", **TOY, **options)


def test_sglang_inconsistent_shapes_across_records(tmp_path: Path) -> None:
    first = {"routed_experts": b64(np.array([0, 1])), "num_layers": 1, "top_k": 2}
    second = {"routed_experts": b64(np.array([0, 1, 2])), "num_layers": 1, "top_k": 3}
    path = write_jsonl(tmp_path / "out.jsonl", [first, second])
    one_line_error(("line 2: top_k: expected 2 (like", "line 1)"), path, "sglang", **TOY)


# --- speculative-moe -----------------------------------------------------------------------


def spec_records(
    ids: np.ndarray, gates: np.ndarray, problem: int, dataset: str = "gsm8k"
) -> Iterator[dict[str, Any]]:
    """The processed recorder's layout (routing_data_collected/*_routing.jsonl): per layer, the
    decode tokens in order."""
    for layer in range(ids.shape[1]):
        for token in range(ids.shape[0]):
            yield {
                "dataset": dataset,
                "problem_id": problem,
                "layer": layer,
                "experts": ids[token, layer].tolist(),
                "gating_probs": gates[token, layer].tolist(),
                "token_idx": token,
            }


def test_speculative_moe_round_trip(tmp_path: Path) -> None:
    ids, gates = ids_and_gates(4, 12)
    records = [*spec_records(ids[:7], gates[:7], 0), *spec_records(ids[7:], gates[7:], 1)]
    result = import_trace(write_jsonl(tmp_path / "r.jsonl", records), "speculative-moe", **TOY)
    t = result.trace
    np.testing.assert_array_equal(t.experts, ids)
    np.testing.assert_array_equal(t.gates, gates)
    np.testing.assert_array_equal(t.request, [0] * 7 + [1] * 5)
    assert (t.phase == DECODE).all()
    assert t.meta["request_ids"] == ["gsm8k/0", "gsm8k/1"]
    assert t.meta["source_layers"] == [0, 1, 2, 3]
    assert t.meta["datasets"] == ["gsm8k"]
    assert "misaligned_layers" not in t.meta
    assert result.report == []


def test_speculative_moe_dropped_record_is_padded_and_reported(tmp_path: Path) -> None:
    ids, gates = ids_and_gates(5, 10)
    records = list(spec_records(ids, gates, 0))
    dropped = 2 * 10 + 5  # layer 2, token 5: the recorder skipped it
    del records[dropped]
    for r in records[dropped : 3 * 10 - 1]:
        r["token_idx"] -= 1  # the processed file renumbers what is left
    result = import_trace(write_jsonl(tmp_path / "r.jsonl", records), "speculative-moe", **TOY)
    t = result.trace
    assert t.meta["misaligned_layers"] == {"0": [2]}
    others = [0, 1, 3]
    np.testing.assert_array_equal(t.experts[:, others], ids[:, others])
    np.testing.assert_array_equal(t.experts[:5, 2], ids[:5, 2])
    np.testing.assert_array_equal(t.experts[5:9, 2], ids[6:, 2])  # shifted by one, as recorded
    assert (t.experts[9, 2] == -1).all() and np.isnan(t.gates[9, 2]).all()
    assert len(result.report) == 1
    assert result.report[0].startswith(
        "request 0 ('gsm8k/0') has 10 rows but fewer records in 1 layers (layer 2: 9): "
        "their missing final rows are -1"
    )


def test_speculative_moe_phase_from_markers_and_raw_token_pos(tmp_path: Path) -> None:
    ids, gates = ids_and_gates(6, 6)
    raw = []  # the raw recorder: prefill positions 0..3, then position 0 per decode step
    for token in range(6):
        for layer in range(L):
            raw.append({"problem_id": 0, "layer": layer, "token_pos": token if token < 4 else 0,
                        "experts": ids[token, layer].tolist(),
                        "gating_probs": gates[token, layer].tolist()})  # fmt: skip
    result = import_trace(write_jsonl(tmp_path / "raw.jsonl", raw), "speculative-moe", **TOY)
    assert result.trace.phase.tolist() == [PREFILL] * 4 + [DECODE] * 2
    assert "phase of 1 requests from token_pos" in result.report[0]
    np.testing.assert_array_equal(result.trace.experts, ids)
    for r, token in zip(raw, np.repeat(np.arange(6), L), strict=True):
        del r["token_pos"]
        r["phase"] = "prefill" if token < 2 else "decode"
    marked = import_trace(write_jsonl(tmp_path / "m.jsonl", raw), "speculative-moe", **TOY)
    assert marked.trace.phase.tolist() == [PREFILL] * 2 + [DECODE] * 4


def test_speculative_moe_reorders_rows_by_gate(tmp_path: Path) -> None:
    ids, gates = ids_and_gates(7, 3)
    records = list(spec_records(ids[:, :, ::-1], gates[:, :, ::-1], 0))  # ascending gates
    result = import_trace(write_jsonl(tmp_path / "r.jsonl", records), "speculative-moe", **TOY)
    np.testing.assert_array_equal(result.trace.experts, ids)
    np.testing.assert_array_equal(result.trace.gates, gates)
    assert result.report == ["3 rows were not in descending gate order: reordered"]


@pytest.mark.parametrize(
    ("change", "fragments"),
    [
        (
            {"experts": [1, 2, 3], "gating_probs": [0.5, 0.3, 0.2]},
            ("experts: expected 2 ids per record (like", "line 1)", "got 3"),
        ),
        ({"experts": [1, 1]}, ("experts: expected distinct expert ids, got [1, 1]",)),
        ({"experts": [1, 9]}, ("experts: expected expert ids in [0, 7], got 9 in [1, 9]",)),
        ({"gating_probs": [0.5]}, ("gating_probs: expected a list of 2 numbers",)),
        ({"layer": -1}, ("layer: expected an integer >= 0, got -1",)),
        ({"phase": "warmup"}, ("phase: expected 'prefill', 'decode', 0 or 1",)),
    ],
    ids=["top-k", "duplicate", "out-of-range", "gates-length", "layer", "phase"],
)
def test_speculative_moe_errors(
    tmp_path: Path, change: dict[str, Any], fragments: tuple[str, ...]
) -> None:
    ids, gates = ids_and_gates(8, 3)
    records = list(spec_records(ids, gates, 0))
    records[4].update(change)
    path = write_jsonl(tmp_path / "r.jsonl", records)
    one_line_error((f"speculative-moe {path} line 5:", *fragments), path, "speculative-moe", **TOY)


def test_a_catalog_model_gives_num_experts_and_layers(tmp_path: Path) -> None:
    ids, gates = ids_and_gates(9, 4)
    path = write_jsonl(tmp_path / "r.jsonl", list(spec_records(ids, gates, 0)))
    result = import_trace(path, "speculative-moe", model="mixtral-8x7b")
    t = result.trace
    assert (t.num_experts, t.num_layers) == (8, 32)  # the catalog's, not max id + 1 or 4 layers
    np.testing.assert_array_equal(t.experts[:, :L], ids)
    assert (t.experts[:, L:] == -1).all()
    assert t.meta["source_layers"] == [0, 1, 2, 3] + [None] * 28
    assert result.report == ["28 of 32 layers have no records, their rows are -1: 4-31"]
    inferred = import_trace(path, "speculative-moe", model="my-moe")
    assert inferred.trace.num_experts == int(ids.max()) + 1
    assert inferred.report[0].startswith(f"num_experts = {int(ids.max()) + 1}, the highest id + 1")


# --- vllm-moe-logger -----------------------------------------------------------------------


def logger_run(path: Path, ids: np.ndarray, gates: np.ndarray, layer: int) -> Path:
    """One run of weiran0129/vLLM-MoE-Logger: a meta header, then a route record per token of
    the logged layer, token_idx = the position in the forward batch."""
    header = {"type": "meta", "model_id": "Qwen/Qwen1.5-MoE-A2.7B-Chat", "vllm_version": "0.11",
              "seed": 1234, "layers_logged": [layer], "top_k": K, "created_at": 0.0}  # fmt: skip
    routes = [
        {"type": "route", "req_id": "r1", "token_idx": t % 3, "layer": layer,
         "topk_ids": ids[t, layer].tolist(), "topk_weights": (gates[t, layer] / 4).tolist()}
        for t in range(ids.shape[0])
    ]  # fmt: skip
    return write_jsonl(path, [header, *routes])


def test_vllm_moe_logger_one_run_per_layer(tmp_path: Path) -> None:
    ids, gates = ids_and_gates(10, 9)
    for layer in (0, 2):
        logger_run(tmp_path / f"moe_layer{layer}.jsonl", ids, gates, layer)
    result = import_trace(tmp_path, "vllm-moe-logger", num_layers=L, **TOY)
    t = result.trace
    np.testing.assert_array_equal(t.experts[:, [0, 2]], ids[:, [0, 2]])
    np.testing.assert_array_equal(t.gates[:, [0, 2]], gates[:, [0, 2]] / 4)  # not renormalized
    assert (t.experts[:, [1, 3]] == -1).all()
    assert t.meta["source_layers"] == [0, None, 2, None]
    assert t.meta["source_model"] == ["Qwen/Qwen1.5-MoE-A2.7B-Chat"]
    assert (t.request == 0).all() and (t.phase == DECODE).all()
    assert result.report[0] == "2 of 4 layers have no records, their rows are -1: 1, 3"
    assert result.report[1].startswith("every record has req_id 'r1'")
    compact = import_trace(tmp_path, "vllm-moe-logger", only_logged_layers=True, **TOY).trace
    np.testing.assert_array_equal(compact.experts, ids[:, [0, 2]])
    assert compact.meta["source_layers"] == [0, 2]


def test_vllm_moe_logger_same_layer_in_two_runs_keeps_the_first(tmp_path: Path) -> None:
    ids, gates = ids_and_gates(11, 5)
    logger_run(tmp_path / "moe_layer0.jsonl", ids, gates, 0)
    other, _ = ids_and_gates(12, 5)
    logger_run(tmp_path / "moe_routes.jsonl", other, gates, 0)  # upstream's default file name
    result = import_trace(tmp_path, "vllm-moe-logger", **TOY)
    np.testing.assert_array_equal(result.trace.experts, ids[:, :1])
    assert result.report[0] == (
        "request 'r1' layer 0 is in moe_layer0.jsonl and moe_routes.jsonl: kept moe_layer0.jsonl "
        "(first by name), skipped 5 records of moe_routes.jsonl"
    )


def test_vllm_moe_logger_header_top_k_must_match(tmp_path: Path) -> None:
    ids, gates = ids_and_gates(13, 2)
    path = logger_run(tmp_path / "moe_layer1.jsonl", ids, gates, 1)
    lines = path.read_text().splitlines()
    lines[0] = lines[0].replace('"top_k": 2', '"top_k": 4')
    path.write_text("\n".join(lines))
    one_line_error(
        (f"{path} line 2: experts: expected 4 ids per record (the header's top_k", "got 2"),
        path, "vllm-moe-logger", **TOY,
    )  # fmt: skip


# --- long tables ---------------------------------------------------------------------------


def long_table(ids: np.ndarray, gates: np.ndarray, split: int) -> pd.DataFrame:
    rows = []
    for t in range(ids.shape[0]):
        request, token = ("b", t) if t < split else ("a", t - split)  # "b" appears first
        for layer in range(ids.shape[1]):
            for rank in range(ids.shape[2]):
                phase = "prefill" if token < 2 else "decode"
                rows.append({"request": request, "token": token, "layer": layer, "rank": rank,
                             "expert": int(ids[t, layer, rank]), "gate": gates[t, layer, rank],
                             "phase": phase, "note": "x"})  # fmt: skip
    shuffled = pd.DataFrame(rows).sample(frac=1.0, random_state=0)  # any row order, but
    first = int(np.argmax(shuffled.request.to_numpy() == "b"))  # a row of "b" comes first
    return pd.concat([shuffled.iloc[first : first + 1], shuffled.drop(shuffled.index[first])])


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_long_table_round_trip(tmp_path: Path, suffix: str) -> None:
    ids, gates = ids_and_gates(14, 8)
    table = long_table(ids, gates, 5)
    missing = (
        (table.token == 1) & (table.request == "a") & (table.layer == 3) & (table["rank"] == 1)
    )
    table = table[~missing]
    path = tmp_path / f"routing{suffix}"
    if suffix == ".csv":
        table.to_csv(path, index=False)
    else:
        table.to_parquet(path, index=False)
    result = import_trace(path, "long", read_table=read_table_columns, **TOY)
    t = result.trace
    want, want_gates = ids.copy(), gates.copy()
    want[6, 3, 1], want_gates[6, 3, 1] = -1, np.nan
    np.testing.assert_array_equal(t.experts, want)
    np.testing.assert_array_equal(t.gates, want_gates)
    np.testing.assert_array_equal(t.request, [0] * 5 + [1] * 3)
    assert t.meta["request_ids"] == ["b", "a"]
    assert t.phase.tolist() == [PREFILL, PREFILL, DECODE, DECODE, DECODE, PREFILL, PREFILL, DECODE]
    assert result.report == [f"ignored fields: note ({len(table)} records)"]


def test_long_parquet_needs_a_table_reader(tmp_path: Path) -> None:
    path = tmp_path / "routing.parquet"
    pd.DataFrame({"request": [0]}).to_parquet(path)
    one_line_error((f"long {path}", "a read_table option"), path, "long", **TOY)


@pytest.mark.parametrize(
    ("edit", "fragments"),
    [
        (lambda df: df.drop(columns=["rank"]), ("columns: expected", "missing ['rank']")),
        (lambda df: pd.concat([df, df.iloc[:1]]), ("each cell once", "the same cell as line 2")),
        (lambda df: df.assign(expert=["x"] + [1] * (len(df) - 1)), ("line 2: expert", "'x'")),
        (lambda df: df.assign(expert=[9] + [1] * (len(df) - 1)), ("values in [0, 7], got 9",)),
        (lambda df: df.assign(phase=["decode"] + ["prefill"] * (len(df) - 1)),
         ("one phase per (request, token)",)),
    ],
    ids=["missing-column", "duplicate-cell", "not-a-number", "out-of-range", "two-phases"],
)  # fmt: skip
def test_long_errors(tmp_path: Path, edit: Any, fragments: tuple[str, ...]) -> None:
    ids, gates = ids_and_gates(15, 2)
    table = long_table(ids, gates, 2).sort_values(["token", "layer", "rank"])
    path = tmp_path / "routing.csv"
    edit(table).to_csv(path, index=False)
    one_line_error((f"long {path}", *fragments), path, "long", **TOY)


# --- the command line and the shared real trace --------------------------------------------


def test_cli_import_writes_the_trace_and_prints_the_report(tmp_path: Path) -> None:
    ids, gates = ids_and_gates(16, 6)
    records = list(spec_records(ids, gates, 3))
    del records[-1]  # the last token of layer 3
    src = write_jsonl(tmp_path / "r.jsonl", records)
    out = tmp_path / "trace.npz"
    args = ["trace", "import", str(src), "--format", "speculative-moe", "--model", "toy-moe",
            "--num-experts", "8", "--out", str(out)]  # fmt: skip
    result = CliRunner().invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == (
        f"wrote {out}: 6 tokens x 4 layers x top-2 of 8 experts (toy-moe), 1 requests from "
        f"speculative-moe {src}"
    )
    assert lines[1].startswith("  request 0 ('gsm8k/3') has 6 rows but fewer records in 1 layers")
    t = load_trace(out)
    np.testing.assert_array_equal(t.experts[:, :3], ids[:, :3])
    assert t.meta["misaligned_layers"] == {"0": [3]}
    with pytest.raises(SpecmdError, match=r"^--format: expected one of vllm, .*, got 'x'$"):
        CliRunner().invoke(app, [*args[:4], "x", *args[5:]], catch_exceptions=False)


@pytest.mark.skipif(not SHARED.is_file(), reason="no ../shared/traces (reference data)")
def test_reimports_the_shared_mixtral_trace(tmp_path: Path) -> None:
    """The real humaneval_p0 routing, written back in the recorder's layout, imports exactly."""
    with np.load(SHARED, allow_pickle=False) as data:
        ids, gates = data["humaneval_p0_ids"], data["humaneval_p0_gates"]
    records = list(spec_records(ids, gates, 0, dataset="humaneval"))
    result: ImportResult = import_trace(
        write_jsonl(tmp_path / "humaneval_routing.jsonl", records),
        "speculative-moe",
        model="mixtral-8x7b",
    )
    np.testing.assert_array_equal(result.trace.experts, ids)
    np.testing.assert_array_equal(result.trace.gates, gates)
    assert result.report == []

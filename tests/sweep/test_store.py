"""The results table on disk: atomic parts, one schema, repair after a crash, pandas reads it."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from specmd_sim.errors import SpecmdError
from specmd_sim.sweep.store import (
    ResultStore,
    column_order,
    export_csv,
    load_table,
    read_rows,
    unify,
)

AXES = ["capacity", "eviction"]


def seed(index: int, capacity: object) -> dict:
    return {
        "point_index": index,
        "point_id": f"replay-{index:012x}",
        "status": "ok",
        "error": None,
        "axis.capacity": capacity,
        "axis.eviction": "lru",
        "engine": "replay",
        "hardware_grade": None,
        "config.cache.capacity": capacity,
        "config.seed": index,
    }


SEEDS = [seed(0, 8), seed(1, "5%"), seed(2, 16)]


def ok_row(index: int, **metrics: object) -> dict:
    return {**SEEDS[index], "hits": 10 + index, "hit_rate": 0.5, **metrics}


def error_row(index: int) -> dict:
    return {**SEEDS[index], "status": "error", "error": "cache.capacity: too small"}


def store(root: Path) -> ResultStore:
    s = ResultStore(root, AXES, len(SEEDS), SEEDS)
    s.scan()
    return s


def schemas(root: Path) -> list[pa.Schema]:
    return [pq.read_schema(p) for p in sorted(root.glob("*.parquet"))]


def test_kinds_unify_to_the_narrowest_common_one() -> None:
    assert unify("int", "float") == "float"
    assert unify("null", "int") == "int" and unify("bool", "null") == "bool"
    assert unify("int", "string") == "string" and unify("bool", "int") == "string"


def test_column_order_is_canonical() -> None:
    names = ["config.seed", "ttft_s", "inputs.model", "error", "axis.eviction",
             "hardware_grade", "hit_rate", "point_id", "engine", "axis.capacity", "status",
             "point_index"]  # fmt: skip
    assert column_order(names, AXES) == [
        "point_index", "point_id", "status", "error", "axis.capacity", "axis.eviction",
        "engine", "hardware_grade", "hit_rate", "ttft_s", "inputs.model", "config.seed",
    ]  # fmt: skip


def test_an_error_row_first_then_ok_rows_share_one_schema(tmp_path: Path) -> None:
    s = store(tmp_path)
    s.append(error_row(1))  # no metric columns yet
    s.append(ok_row(0, ttft_s=None))
    s.append(ok_row(2, ttft_s=1.25))
    first, *rest = schemas(tmp_path)
    assert all(schema.equals(first) for schema in rest)
    df = pd.read_parquet(tmp_path)  # the literal promise of the docs
    assert list(df["point_index"]) == [0, 1, 2]
    assert list(df["status"]) == ["ok", "error", "ok"]
    assert df["hits"].isna().tolist() == [False, True, False]
    assert df["ttft_s"].tolist()[2] == 1.25
    # mixed capacity values are one string column; the axis column too
    assert list(df["config.cache.capacity"]) == ["8", "5%", "16"]
    assert list(df["axis.capacity"]) == ["8", "5%", "16"]
    assert first.field("hits").type == pa.int64()


def test_widening_int_to_float_rewrites_earlier_parts(tmp_path: Path) -> None:
    s = store(tmp_path)
    s.append(ok_row(0, stall_s=0))
    assert schemas(tmp_path)[0].field("stall_s").type == pa.int64()
    s.append(ok_row(1, stall_s=0.5))
    assert {schema.field("stall_s").type for schema in schemas(tmp_path)} == {pa.float64()}
    assert [r["stall_s"] for r in read_rows(tmp_path)] == [0.0, 0.5]


def test_the_table_does_not_depend_on_the_order_rows_arrive(tmp_path: Path) -> None:
    rows = [ok_row(0, x=16), ok_row(1, x=0.5), ok_row(2, x="many")]
    for name, order in (("a", [0, 1, 2]), ("b", [2, 1, 0]), ("c", [1, 0, 2])):
        s = store(tmp_path / name)
        for i in order:
            s.append(rows[i])
    tables = [pd.read_parquet(tmp_path / name) for name in "abc"]
    assert tables[0]["x"].tolist() == ["16", "0.5", "many"]
    for table in tables[1:]:
        pd.testing.assert_frame_equal(table, tables[0])


def test_append_replaces_the_row_of_the_same_point(tmp_path: Path) -> None:
    s = store(tmp_path)
    s.append(error_row(0))
    assert s.error_ids() == {"replay-000000000000"}
    s.append(ok_row(0))
    assert len(list(tmp_path.glob("*.parquet"))) == 1
    assert [r["status"] for r in read_rows(tmp_path)] == ["ok"]
    assert s.error_ids() == set()


def test_meta_and_temporary_files_are_not_part_of_the_table(tmp_path: Path) -> None:
    s = store(tmp_path)
    s.append(ok_row(0))
    (tmp_path / "_meta").mkdir()
    (tmp_path / "_meta" / "spec.yaml").write_text("engine: replay\n")
    (tmp_path / ".000001-replay-000000000001.parquet.tmp").write_bytes(b"half a file")
    assert len(pd.read_parquet(tmp_path)) == 1
    store(tmp_path)  # scanning deletes the leftover
    assert not list(tmp_path.glob(".*.tmp"))


def test_scan_repairs_a_part_left_with_an_older_schema(tmp_path: Path) -> None:
    s = store(tmp_path)
    s.append(ok_row(0))
    s.append(ok_row(1, ttft_s=2.0))
    # a crash between writing a wider row and rewriting the older parts leaves this behind
    part = sorted(tmp_path.glob("*.parquet"))[0]
    pq.write_table(pq.read_table(part).drop_columns(["ttft_s"]), part)
    assert len({str(schema) for schema in schemas(tmp_path)}) == 2
    again = store(tmp_path)
    assert len({str(schema) for schema in schemas(tmp_path)}) == 1
    assert again.done_ids() == {SEEDS[0]["point_id"], SEEDS[1]["point_id"]}
    assert [r["ttft_s"] for r in read_rows(tmp_path)] == [None, 2.0]


def test_unreadable_part_is_a_user_error(tmp_path: Path) -> None:
    (tmp_path / "000000-replay-000000000000.parquet").write_bytes(b"not parquet")
    with pytest.raises(SpecmdError, match=r"unreadable one.*delete it"):
        store(tmp_path)


def test_csv_export_and_empty_folders(tmp_path: Path) -> None:
    with pytest.raises(SpecmdError, match="expected result files, got none"):
        load_table(tmp_path)
    with pytest.raises(SpecmdError, match="expected a folder, got none"):
        read_rows(tmp_path / "nope")
    s = store(tmp_path / "sweep")
    s.append(ok_row(0))
    s.append(error_row(1))
    path = export_csv(tmp_path / "sweep", tmp_path / "table.csv")
    csv = pd.read_csv(path)
    assert list(csv.columns) == list(load_table(tmp_path / "sweep").columns)
    assert csv["status"].tolist() == ["ok", "error"]

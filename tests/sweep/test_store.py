"""The results table on disk: a schema known before the first row, atomic parts, pandas reads
them, a part of another schema is refused, a damaged part is not done and readers name it."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from specmd_sim import SimConfig
from specmd_sim.errors import SpecmdError
from specmd_sim.metrics import INPUTS, METRICS
from specmd_sim.sweep.store import (
    ResultStore,
    annotation_kind,
    export_csv,
    load_table,
    read_rows,
    table_columns,
)

AXES = {"capacity": [8, "5%", 16], "eviction": ["lru", "lru", "lru"]}
CONFIGS = [SimConfig(cache={"capacity": c}, eviction={"kind": "lru"}, seed=i)
           for i, c in enumerate(AXES["capacity"])]  # fmt: skip


def seed(index: int) -> dict:
    capacity = AXES["capacity"][index]
    return {
        "point_index": index,
        "point_id": f"simulate-{index:012x}",
        "status": "ok",
        "error": None,
        "axis.capacity": capacity,
        "axis.eviction": "lru",
        "engine": "simulate",
        "hardware_grade": None,
        "config.cache.capacity": capacity,
        "config.seed": index,
    }


def ok_row(index: int, **metrics: object) -> dict:
    return {**seed(index), "hits": 10 + index, "hit_rate": 0.5, "inputs.model": "m", **metrics}


def error_row(index: int) -> dict:
    return {**seed(index), "status": "error", "error": "cache.capacity: too small"}


def store(root: Path, engine: str = "simulate", configs: list = CONFIGS) -> ResultStore:
    s = ResultStore(root, table_columns(engine, AXES, configs), len(configs))
    s.scan()
    return s


def schemas(root: Path) -> list[pa.Schema]:
    return [pq.read_schema(p) for p in sorted(root.glob("*.parquet"))]


def test_columns_come_from_the_spec_and_the_config_model() -> None:
    columns = table_columns("simulate", AXES, CONFIGS)
    names = list(columns)
    metrics = sorted(m.name for m in METRICS.values() if m.when is None)
    config = sorted(n for n in names if n.startswith("config."))
    assert names == [
        "point_index", "point_id", "status", "error", "axis.capacity", "axis.eviction",
        "engine", "hardware_grade", *metrics, *(f"inputs.{k}" for k in sorted(INPUTS)), *config,
    ]  # fmt: skip
    assert (columns["axis.capacity"], columns["axis.eviction"]) == ("string", "string")
    assert (columns["hits"], columns["bytes_demand"], columns["ttft_s"]) == ("int", "int", "float")
    assert (columns["inputs.model"], columns["inputs.capacity_bytes"]) == ("string", "int")
    # from the model: a size spec ("5%" or 8) is text, an optional int an int
    assert columns["config.cache.capacity"] == "string"
    assert columns["config.workload.max_requests"] == "int"
    assert columns["config.predictor.max_distance"] == "int"
    assert columns["config.eviction.kind"] == "string"
    assert columns["config.belady_gap"] == "bool"


def test_the_engine_and_the_configs_choose_the_metrics() -> None:
    replay = table_columns("replay", AXES, CONFIGS)
    assert "hit_rate" in replay and "ttft_s" not in replay and "belady_misses" not in replay
    gap = table_columns("replay", AXES, [*CONFIGS, SimConfig(belady_gap=True)])
    assert gap["belady_misses"] == "int" and gap["belady_reference"] == "string"


def test_plugin_parameters_of_every_point_are_columns() -> None:
    configs = [SimConfig(eviction={"kind": "lru"}),
               SimConfig(eviction={"kind": "least-stale", "order": "layer"})]  # fmt: skip
    columns = table_columns("replay", {}, configs)
    assert columns["config.eviction.order"] == "string"


def test_axis_columns_keep_a_kind_their_values_share() -> None:
    columns = table_columns("replay", {"seed": [0, 1], "x": [0.5, 1], "k": [None, 4]}, CONFIGS)
    assert (columns["axis.seed"], columns["axis.x"], columns["axis.k"]) == ("int", "float", "int")


def test_annotation_kinds() -> None:
    from typing import Literal

    assert annotation_kind(int | None) == "int"
    assert annotation_kind(int | float) == "float"
    assert annotation_kind(Literal["a", "b"]) == "string"
    assert annotation_kind(str | int) == "string"
    assert annotation_kind(int | list[str]) == "string"
    assert annotation_kind(bool) == "bool"


def test_an_error_row_first_then_ok_rows_share_one_schema(tmp_path: Path) -> None:
    s = store(tmp_path)
    s.append(error_row(1))  # no metrics, and still the full schema
    s.append(ok_row(0, ttft_s=None))
    s.append(ok_row(2, ttft_s=1.25, stall_s=0))
    first, *rest = schemas(tmp_path)
    assert all(schema.equals(first) for schema in rest)
    assert first.field("hits").type == pa.int64()
    assert first.field("stall_s").type == pa.float64()
    df = pd.read_parquet(tmp_path)  # the literal promise of the docs
    assert list(df["point_index"]) == [0, 1, 2]
    assert list(df["status"]) == ["ok", "error", "ok"]
    assert df["hits"].isna().tolist() == [False, True, False]
    assert df["ttft_s"].tolist()[2] == 1.25 and df["stall_s"].tolist()[2] == 0.0
    # mixed capacity values are one string column; the axis column too
    assert list(df["config.cache.capacity"]) == ["8", "5%", "16"]
    assert list(df["axis.capacity"]) == ["8", "5%", "16"]


def test_a_row_with_a_column_outside_the_schema_is_refused(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match=r"columns \['surprise'\] are not in the table"):
        store(tmp_path).append(ok_row(0, surprise=1))


def test_append_replaces_the_row_of_the_same_point(tmp_path: Path) -> None:
    s = store(tmp_path)
    s.append(error_row(0))
    assert s.error_ids() == {"simulate-000000000000"}
    s.append(ok_row(0))
    assert len(list(tmp_path.glob("*.parquet"))) == 1
    assert [r["status"] for r in read_rows(tmp_path)] == ["ok"]
    assert s.error_ids() == set()


def test_meta_and_temporary_files_are_not_part_of_the_table(tmp_path: Path) -> None:
    s = store(tmp_path)
    s.append(ok_row(0))
    (tmp_path / "_meta").mkdir()
    (tmp_path / "_meta" / "spec.yaml").write_text("engine: replay\n")
    (tmp_path / ".000001-simulate-000000000001.parquet.tmp-123").write_bytes(b"half a file")
    (tmp_path / ".000002-simulate-000000000002.parquet.tmp").write_bytes(b"an older writer's")
    assert len(pd.read_parquet(tmp_path)) == 1
    again = store(tmp_path)  # scanning deletes the leftovers
    assert sorted(p.name for p in tmp_path.iterdir()) == ["000000-simulate-000000000000.parquet",
                                                          "_meta"]  # fmt: skip
    assert again.done_ids() == {"simulate-000000000000"}


def test_a_failed_write_leaves_neither_a_part_nor_a_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = store(tmp_path)

    def half_written(table: pa.Table, where: object) -> None:
        where.write(b"PAR1 half a file")  # type: ignore[attr-defined]
        raise OSError("No space left on device")

    monkeypatch.setattr(pq, "write_table", half_written)
    with pytest.raises(SpecmdError, match=r"expected a file that can be .*\(No space left on"):
        s.append(ok_row(0))  # one line: the write's OSError is the user's to act on
    assert list(tmp_path.iterdir()) == []


def test_a_part_of_another_schema_is_a_user_error(tmp_path: Path) -> None:
    store(tmp_path).append(ok_row(0))
    part = next(tmp_path.glob("*.parquet"))
    pq.write_table(pq.read_table(part).drop_columns(["ttft_s"]), part)  # an older version's
    with pytest.raises(SpecmdError, match=r"with other columns .* use a new --out folder"):
        store(tmp_path)


def damaged(part: Path) -> dict[str, bytes]:
    """Ways a part can be damaged after it was written, as the bytes it then holds."""
    data = part.read_bytes()
    middle = len(data) // 2
    return {
        "garbage": b"not parquet at all",
        "truncated": data[:middle],
        "empty": b"",
        "zeroed": data[: middle - 200] + bytes(400) + data[middle + 200 :],
    }


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty", "zeroed"])
def test_a_damaged_part_is_not_done_and_every_reader_names_it(tmp_path: Path, damage: str) -> None:
    s = store(tmp_path)
    s.append(ok_row(0))
    part = s.append(ok_row(1))
    part.write_bytes(damaged(part)[damage])
    again = store(tmp_path)  # resuming: the point runs again, and its new row replaces the file
    assert again.done_ids() == {"simulate-000000000000"} and again.unreadable == [part]
    for reader in (read_rows, load_table, lambda root: export_csv(root, tmp_path / "t.csv")):
        with pytest.raises(SpecmdError) as info:
            reader(tmp_path)
        message = str(info.value)
        assert message.startswith(f"{part}: expected a parquet result file, got an unreadable "
                                  "one (") and "\n" not in message  # fmt: skip
        assert message.endswith("; resume the sweep (--resume) to run that point again")
    assert not (tmp_path / "t.csv").exists()
    again.append(ok_row(1))
    assert [r["point_index"] for r in read_rows(tmp_path)] == [0, 1]


def test_readers_name_a_part_of_other_columns(tmp_path: Path) -> None:
    s = store(tmp_path)
    s.append(ok_row(0))
    part = s.append(ok_row(1))
    pq.write_table(pq.read_table(part).drop_columns(["ttft_s"]), part)
    with pytest.raises(SpecmdError, match=rf"^{part}: expected the columns of 000000-\S+, got "
                                          "other columns"):  # fmt: skip
        read_rows(tmp_path)


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
    # reading the parts one by one gives what the documented reader gives
    pd.testing.assert_frame_equal(load_table(tmp_path / "sweep"),
                                  pd.read_parquet(tmp_path / "sweep"))  # fmt: skip
    assert csv["status"].tolist() == ["ok", "error"]

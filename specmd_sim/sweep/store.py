"""The results table of a sweep: one small parquet file per finished point.

Layout of a sweep folder ``DIR``::

    DIR/000000-simulate-3fa9c2b1d0e4.parquet   one row per finished point (ok or error)
    DIR/000001-simulate-77c1e0a2b5d9.parquet
    DIR/_meta/spec.yaml                         the spec, as resolved
    DIR/_meta/points.json                       every point: index, id, axis values
    DIR/_meta/lock                              held while a sweep writes to DIR
    DIR/_runs/simulate-3fa9c2b1d0e4/            with --keep-runs: each point's run folder

``pandas.read_parquet(DIR)`` reads the table (pyarrow skips names starting with ``_`` or
``.``), its rows in point order because the file names start with the point index.

Nothing is lost and nothing is duplicated: a row is written to a hidden temporary file, flushed
and renamed into place (:func:`specmd_sim.atomic.atomic_file`), so a file either holds a whole
row or does not exist, and a point has exactly one file name. A resumed sweep skips the points
whose file exists and reads. A part that does not read (damaged after it was written: a full
disk, a bad copy) is not done: a resumed sweep runs its point again, which replaces it; until
then every reader (:func:`read_rows`, :func:`load_table`, ``specmd regress --sweep``) refuses
the table with one line naming that file.

Every file has the same schema, so that pyarrow reads them as one table, and it is known before
the first point runs (:func:`table_columns`), from the spec rather than from the rows:

- bookkeeping: ``point_index`` (int64), ``point_id``, ``status``, ``error`` (string), then
  the sweep's own columns (``extra``): ``run_dir`` with ``--keep-runs``, ``search.*`` with a
  rate search;
- ``axis.<name>``: int64, float64 or bool when every value of the axis is one, else string;
- ``engine``, ``hardware_grade``: string;
- the metrics the sweep's engine reports with the points' configs, and ``inputs.<key>``, typed
  by their unit in :mod:`specmd_sim.metric_spec`: counts and bytes int64, names string, the
  rest float64;
- ``config.<path>``: every field of every point's config, typed by its annotation in the config
  model (bool, int64, float64, or string for text and choices); a field that holds values of
  several kinds (``cache.capacity``: ``"5%"`` or ``8``) is a string column, its numbers as JSON.

Values that a row lacks (the metrics of a failed point) are null. A part written with another
schema (by another version of specmd-sim) is refused with a one-line error. Columns are ordered:
bookkeeping, the axes in spec order, ``engine``, ``hardware_grade``, the metrics, ``inputs.*``
and ``config.*``, each of the last three groups alphabetically.
"""

from __future__ import annotations

import json
import os
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel

from specmd_sim.atomic import atomic_file, make_folder
from specmd_sim.config import SimConfig, config_to_dict
from specmd_sim.errors import SpecmdError
from specmd_sim.metrics import INPUTS, METRICS, reported, value_type

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

BOOKKEEPING = ("point_index", "point_id", "status", "error")
META_DIR = "_meta"
PART_SUFFIX = ".parquet"

Row = dict[str, Any]
Kind = Literal["bool", "int", "float", "string"]

# --- the columns -----------------------------------------------------------------------------

_KIND_OF_TYPE: dict[type, Kind] = {bool: "bool", int: "int", float: "float", str: "string"}


def table_columns(
    engine: str,
    axes: Mapping[str, Sequence[Any]],
    configs: Iterable[SimConfig],
    extra: Mapping[str, Kind] | None = None,
) -> dict[str, Kind]:
    """The columns of a sweep's table and their kinds, in order: ``axes`` maps each axis to
    its cell value at every point, ``configs`` are the points' configs, ``extra`` the columns
    the sweep adds after the bookkeeping (``run_dir``, ``search.*``)."""
    columns: dict[str, Kind] = {"point_index": "int", "point_id": "string", "status": "string",
                                "error": "string"}  # fmt: skip
    columns.update(extra or {})
    for name, values in axes.items():
        columns[f"axis.{name}"] = _axis_kind(values)
    columns.update(engine="string", hardware_grade="string")
    config_kinds: dict[str, Kind] = {}
    metrics: dict[str, Any] = {}
    for config in configs:  # one at a time: ``configs`` may be a stream of a large grid
        _add_model_kinds(config, "config", config_kinds)
        dump = config_to_dict(config)
        metrics.update((m.name, m) for m in METRICS.values()
                       if m.name not in metrics and reported(m, engine, dump))  # fmt: skip
    columns.update((name, _KIND_OF_TYPE[value_type(m.unit)]) for name, m in sorted(
        metrics.items()))  # fmt: skip
    columns.update(
        (f"inputs.{name}", _KIND_OF_TYPE[value_type(m.unit)]) for name, m in sorted(INPUTS.items())
    )
    columns.update(sorted(config_kinds.items()))
    return columns


def _axis_kind(values: Sequence[Any]) -> Kind:
    return _common_kind({_KIND_OF_TYPE.get(type(v), "string") for v in values if v is not None})


def _add_model_kinds(model: BaseModel, prefix: str, out: dict[str, Kind]) -> None:
    """The kind of every field of ``model`` (nested models flattened to dotted paths, as in
    :func:`specmd_sim.metrics.result_row`); a path that two models type differently (two
    plug-ins' parameters of one name) is a string column."""
    for name, field in type(model).model_fields.items():
        value = getattr(model, name)
        path = f"{prefix}.{name}"
        if isinstance(value, BaseModel):
            _add_model_kinds(value, path, out)
            continue
        kind = annotation_kind(field.annotation)
        out[path] = kind if out.get(path, kind) == kind else "string"


def annotation_kind(annotation: Any) -> Kind:
    """The column kind of a config field's type: ``int | None`` is int, ``Literal["a", "b"]``
    string, ``str | int`` string (several kinds), lists and mappings string (as JSON)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Union or origin is types.UnionType:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        kinds = {annotation_kind(a) for a in args}
    elif origin is Literal:
        kinds = {_KIND_OF_TYPE.get(type(v), "string") for v in typing.get_args(annotation)}
    else:
        kinds = {_KIND_OF_TYPE.get(annotation, "string")}
    return _common_kind(kinds)


def _common_kind(kinds: set[Kind]) -> Kind:
    """One kind for a column that may hold values of ``kinds``: ints among floats are floats;
    anything else mixed (or nothing known) is string."""
    if kinds == {"int", "float"}:
        return "float"
    return kinds.pop() if len(kinds) == 1 else "string"


def cell(value: Any, kind: Kind) -> Any:
    """A value as a cell of a column of ``kind``: numbers of a string column as JSON."""
    if value is None:
        return None
    if kind == "string":
        return value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    if kind == "float":
        return float(value)
    return value


def _arrow_schema(columns: Mapping[str, Kind]) -> pa.Schema:
    import pyarrow as pa

    types_ = {"bool": pa.bool_(), "int": pa.int64(), "float": pa.float64(), "string": pa.string()}
    return pa.schema([(name, types_[kind]) for name, kind in columns.items()])


# --- the store -------------------------------------------------------------------------------


class ResultStore:
    """The parquet parts of one sweep folder, all with the schema of ``columns``
    (:func:`table_columns`); ``total`` points give the width of the file names' index."""

    def __init__(self, root: Path, columns: Mapping[str, Kind], total: int):
        self.root = Path(root)
        self.columns = dict(columns)
        self.width = max(6, len(str(max(total - 1, 0))))
        self._parts: dict[str, Path] = {}  # point id -> file
        self.unreadable: list[Path] = []  # parts that do not read: not done

    # -- files --

    def part_name(self, index: int, point_id: str) -> str:
        return f"{index:0{self.width}d}-{point_id}{PART_SUFFIX}"

    def scan(self) -> None:
        """Find the parts on disk and delete leftover temporary files. A part of another schema
        is refused; one that does not read is listed in :attr:`unreadable` and not done."""
        self._parts, self.unreadable = {}, []
        make_folder(self.root)
        schema = _arrow_schema(self.columns)
        for path in sorted(self.root.iterdir()):
            if is_temporary(path) and path.is_file():
                path.unlink()
            elif path.is_file() and is_part(path):
                try:
                    table = read_part(path)
                except SpecmdError:
                    self.unreadable.append(path)
                    continue
                if not table.schema.equals(schema):
                    raise SpecmdError(
                        f"{path}: expected a result file with this sweep's columns, got one "
                        "with other columns (written by another version of specmd-sim); use "
                        "a new --out folder, or delete the file to run that point again"
                    )
                self._parts[part_point_id(path)] = path

    def done_ids(self) -> set[str]:
        return set(self._parts)

    def error_ids(self) -> set[str]:
        return {row["point_id"] for row in self.read_rows() if row["status"] != "ok"}

    def append(self, row: Row) -> Path:
        """Write one finished point's row (replacing an earlier row of the same point)."""
        unknown = sorted(row.keys() - self.columns.keys())
        if unknown:
            raise RuntimeError(f"row of point {row['point_index']}: columns {unknown} are not "
                               "in the table's schema (table_columns)")  # fmt: skip
        path = self.root / self.part_name(row["point_index"], row["point_id"])
        self._write(path, row)
        self._parts[row["point_id"]] = path
        return path

    def read_rows(self) -> list[Row]:
        """Every row, in point order, as Python values."""
        rows: list[Row] = []
        for path in sorted(self._parts.values()):
            rows.extend(read_part(path).to_pylist())
        return rows

    def _write(self, path: Path, row: Row) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        data = {name: [cell(row.get(name), kind)] for name, kind in self.columns.items()}
        table = pa.Table.from_pydict(data, schema=_arrow_schema(self.columns))
        with atomic_file(path) as tmp, open(tmp, "wb") as handle:
            pq.write_table(table, handle)
            handle.flush()
            os.fsync(handle.fileno())


def read_part(path: Path) -> pa.Table:
    """One part as a table; one line naming the file if it does not read."""
    import pyarrow.parquet as pq

    try:
        return pq.read_table(path)
    except Exception as exc:  # pyarrow raises several types for a damaged file
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        reason = reason.removeprefix(f"Could not open Parquet input source '{path}': ")
        raise SpecmdError(
            f"{path}: expected a parquet result file, got an unreadable one ({reason}); "
            "resume the sweep (--resume) to run that point again"
        ) from None


def is_temporary(path: Path) -> bool:
    """A part's temporary file (``.NAME.parquet.tmp-PID``, :func:`specmd_sim.atomic.atomic_file`;
    ``.NAME.parquet.tmp`` before it), left by a writer that was killed."""
    return path.name.startswith(".") and f"{PART_SUFFIX}.tmp" in path.name


def is_part(path: Path) -> bool:
    return (
        path.name.endswith(PART_SUFFIX)
        and not path.name.startswith(("_", "."))
        and "-" in path.name
    )


def part_point_id(path: Path) -> str:
    return path.name.removesuffix(PART_SUFFIX).split("-", 1)[1]


def part_files(root: Path) -> list[Path]:
    """The parts of a sweep folder, in point order."""
    return sorted(p for p in Path(root).iterdir() if p.is_file() and is_part(p))


# --- reading a sweep folder ------------------------------------------------------------------


def load_table(root: Path | str) -> pd.DataFrame:
    """The results table of a sweep folder as a DataFrame (as ``pandas.read_parquet(DIR)``)."""
    return _read_table(root).to_pandas()


def read_rows(root: Path | str) -> list[Row]:
    """The results table of a sweep folder as rows of Python values, in point order."""
    return _read_table(root).to_pylist()


def _read_table(root: Path | str) -> pa.Table:
    """Every part, each read and checked on its own so that a damaged one or one of another
    schema is named in one line (a dataset read of the folder would raise from deep inside)."""
    import pyarrow as pa

    root = Path(root)
    if not root.is_dir():
        raise SpecmdError(f"sweep folder {root}: expected a folder, got none")
    parts = part_files(root)
    if not parts:
        raise SpecmdError(f"sweep folder {root}: expected result files, got none")
    tables = [read_part(path) for path in parts]
    for path, table in zip(parts, tables, strict=True):
        if not table.schema.equals(tables[0].schema):
            raise SpecmdError(
                f"{path}: expected the columns of {parts[0].name}, got other columns (a part "
                "of another sweep or another version of specmd-sim); move it out of the folder"
            )
    return pa.concat_tables(tables)


def export_csv(root: Path | str, path: Path | str) -> Path:
    """Write the results table of a sweep folder as CSV (atomically); returns the path."""
    path = Path(path)
    table = load_table(root)
    with atomic_file(path) as tmp:
        table.to_csv(tmp, index=False)
    return path

"""The results table of a sweep: one small parquet file per finished point.

Layout of a sweep folder ``DIR``::

    DIR/000000-simulate-3fa9c2b1d0e4.parquet   one row per finished point (ok or error)
    DIR/000001-simulate-77c1e0a2b5d9.parquet
    DIR/_meta/spec.yaml                         the spec, as resolved
    DIR/_meta/points.json                       every point: index, id, axis values
    DIR/_meta/lock                              held while a sweep writes to DIR

``pandas.read_parquet(DIR)`` reads the table (pyarrow skips names starting with ``_`` or
``.``), its rows in point order because the file names start with the point index.

Nothing is lost and nothing is duplicated: a row is written to a hidden temporary file, flushed
and renamed into place, so a file either holds a whole row or does not exist, and a point has
exactly one file name. A resumed sweep skips the points whose file exists.

Every file has the same schema, so that pyarrow reads them as one table (it takes the schema of
the first file). Column types are derived from the values, the same for every row: null, bool,
int64, float64 or string; a column whose values mix kinds (``config.cache.capacity`` is ``"5%"``
or a slot count) is a string column, and ``config.cache.capacity`` always is. When a new row
widens the schema (a new column, or int becoming float), the files already written are
rewritten to it; opening a folder repairs any file a crash left behind with an older schema.
Columns are ordered: bookkeeping (``point_index``, ``point_id``, ``status``, ``error``), the
axes in spec order, ``engine``, ``hardware_grade``, the metrics, ``inputs.*`` and ``config.*``,
each of the last three groups alphabetically.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specmd_sim.errors import SpecmdError

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

BOOKKEEPING = ("point_index", "point_id", "status", "error")
# kinds known before any row exists, so that the first error row or replay row does not fix
# them to null
FIXED_KINDS = {
    "point_index": "int",
    "point_id": "string",
    "status": "string",
    "error": "string",
    "engine": "string",
    "hardware_grade": "string",
}
META_DIR = "_meta"
PART_SUFFIX = ".parquet"
ALWAYS_STRING = frozenset({"config.cache.capacity"})

Row = dict[str, Any]

# --- column kinds ----------------------------------------------------------------------------

_KINDS = ("null", "bool", "int", "float", "string")


def value_kind(value: Any) -> str:
    """The kind of one cell: null, bool, int, float or string (lists and mappings as JSON)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    return "string"


def unify(a: str, b: str) -> str:
    """The narrowest kind holding values of kinds ``a`` and ``b``."""
    if a == b or b == "null":
        return a
    if a == "null":
        return b
    if {a, b} == {"int", "float"}:
        return "float"
    return "string"


def cell(value: Any, kind: str) -> Any:
    """A value converted to a column kind.

    A number becomes the same string whether it was stored as an int or a float before a
    column widened to string (``16`` and ``16.0`` both give ``"16"``), so a table does not
    depend on the order its rows arrived in.
    """
    if value is None:
        return None
    if kind == "string":
        if isinstance(value, str):
            return value
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        return json.dumps(value, sort_keys=True)
    if kind == "float":
        return float(value)
    return value


def _arrow_type(kind: str) -> pa.DataType:
    import pyarrow as pa

    return {
        "null": pa.null(),
        "bool": pa.bool_(),
        "int": pa.int64(),
        "float": pa.float64(),
        "string": pa.string(),
    }[kind]


def _kind_of_type(dtype: pa.DataType) -> str:
    import pyarrow as pa

    for kind in _KINDS:
        if dtype == _arrow_type(kind):
            return kind
    if pa.types.is_integer(dtype):
        return "int"
    if pa.types.is_floating(dtype):
        return "float"
    return "string"


def row_kinds(row: Row) -> dict[str, str]:
    return {
        name: "string" if name in ALWAYS_STRING and value is not None else value_kind(value)
        for name, value in row.items()
    }


def merge_kinds(kinds: dict[str, str], more: dict[str, str]) -> dict[str, str]:
    """Column kinds of two tables together."""
    out = dict(kinds)
    for name, kind in more.items():
        out[name] = unify(out.get(name, "null"), kind)
    for name in ALWAYS_STRING & out.keys():
        out[name] = "string"
    return out


def column_order(names: Iterable[str], axes: Sequence[str]) -> list[str]:
    """The canonical column order (see the module docstring)."""
    axis_rank = {f"axis.{name}": i for i, name in enumerate(axes)}

    def rank(name: str) -> tuple[int, int, str]:
        if name in BOOKKEEPING:
            return (0, BOOKKEEPING.index(name), "")
        if name.startswith("axis."):
            return (1, axis_rank.get(name, len(axis_rank)), name)
        if name in ("engine", "hardware_grade"):
            return (2, 0 if name == "engine" else 1, "")
        if name.startswith("inputs."):
            return (4, 0, name)
        if name.startswith("config."):
            return (5, 0, name)
        return (3, 0, name)

    return sorted(names, key=rank)


# --- the store -------------------------------------------------------------------------------


class ResultStore:
    """The parquet parts of one sweep folder, all with one schema.

    ``axes`` gives the order of the axis columns; ``seed_rows`` (the part of every row known
    before running: bookkeeping, axes, config) fixes their kinds up front, so that only the
    result columns can widen the schema later.
    """

    def __init__(self, root: Path, axes: Sequence[str], total: int, seed_rows: Iterable[Row]):
        self.root = Path(root)
        self.axes = list(axes)
        self.width = max(6, len(str(max(total - 1, 0))))
        kinds = dict(FIXED_KINDS)
        for row in seed_rows:
            kinds = merge_kinds(kinds, row_kinds(row))
        self.kinds = kinds
        self._parts: dict[str, Path] = {}  # point id -> file
        self._schema: pa.Schema | None = None

    # -- files --

    def part_name(self, index: int, point_id: str) -> str:
        return f"{index:0{self.width}d}-{point_id}{PART_SUFFIX}"

    def scan(self) -> None:
        """Find the parts on disk, delete leftover temporary files, and bring every part to
        one schema (a crash may have interrupted a schema change)."""
        self._parts = {}
        self.root.mkdir(parents=True, exist_ok=True)
        for path in sorted(self.root.iterdir()):
            if path.name.startswith(".") and path.name.endswith(".tmp"):
                path.unlink()
            elif path.is_file() and is_part(path):
                self._parts[part_point_id(path)] = path
        schemas = {path: _read_schema(path) for path in self._parts.values()}
        for schema in schemas.values():
            self.kinds = merge_kinds(self.kinds, {f.name: _kind_of_type(f.type) for f in schema})
        self._schema = None
        target = self.schema()
        for path, schema in schemas.items():
            if not schema.equals(target):
                self._rewrite(path)

    def done_ids(self) -> set[str]:
        return set(self._parts)

    def error_ids(self) -> set[str]:
        return {row["point_id"] for row in self.read_rows() if row["status"] != "ok"}

    def schema(self) -> pa.Schema:
        import pyarrow as pa

        if self._schema is None:
            names = column_order(self.kinds, self.axes)
            self._schema = pa.schema([(name, _arrow_type(self.kinds[name])) for name in names])
        return self._schema

    def append(self, row: Row) -> Path:
        """Write one finished point's row (replacing an earlier row of the same point)."""
        widened = merge_kinds(self.kinds, row_kinds(row))
        if widened != self.kinds:
            self.kinds = widened
            self._schema = None
            for path in sorted(self._parts.values()):
                self._rewrite(path)
        path = self.root / self.part_name(row["point_index"], row["point_id"])
        self._write(path, [row])
        self._parts[row["point_id"]] = path
        return path

    def read_rows(self) -> list[Row]:
        """Every row, in point order, as Python values."""
        import pyarrow.parquet as pq

        rows: list[Row] = []
        for path in sorted(self._parts.values()):
            rows.extend(pq.read_table(path).to_pylist())
        return rows

    def _rewrite(self, path: Path) -> None:
        import pyarrow.parquet as pq

        self._write(path, pq.read_table(path).to_pylist())

    def _write(self, path: Path, rows: list[Row]) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        schema = self.schema()
        kinds = self.kinds
        columns = {
            name: [cell(row.get(name), kinds[name]) for row in rows] for name in schema.names
        }
        table = pa.Table.from_pydict(columns, schema=schema)
        tmp = path.with_name(f".{path.name}.tmp")
        with open(tmp, "wb") as handle:
            pq.write_table(table, handle)
            handle.flush()
            os.fsync(handle.fileno())
        tmp.replace(path)


def _read_schema(path: Path) -> pa.Schema:
    import pyarrow.parquet as pq

    try:
        return pq.read_schema(path)
    except Exception as exc:  # pyarrow raises several types for a damaged file
        raise SpecmdError(
            f"{path}: expected a parquet result file, got an unreadable one ({exc}); "
            "delete it to run that point again"
        ) from None


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
    """The results table of a sweep folder as a DataFrame (``pandas.read_parquet(DIR)``)."""
    import pandas as pd

    root = Path(root)
    if not root.is_dir():
        raise SpecmdError(f"sweep folder {root}: expected a folder, got none")
    if not part_files(root):
        raise SpecmdError(f"sweep folder {root}: expected result files, got none")
    return pd.read_parquet(root)


def read_rows(root: Path | str) -> list[Row]:
    """The results table of a sweep folder as rows of Python values, in point order."""
    import pyarrow.parquet as pq

    root = Path(root)
    if not root.is_dir():
        raise SpecmdError(f"sweep folder {root}: expected a folder, got none")
    parts = part_files(root)
    if not parts:
        raise SpecmdError(f"sweep folder {root}: expected result files, got none")
    return pq.read_table(root).to_pylist()


def export_csv(root: Path | str, path: Path | str) -> Path:
    """Write the results table of a sweep folder as CSV (atomically); returns the path."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    load_table(root).to_csv(tmp, index=False)
    tmp.replace(path)
    return path

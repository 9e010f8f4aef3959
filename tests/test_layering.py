"""The package's layers (DESIGN.md §3) hold: no import cycle, no upward import, a light core.

The import graph is read from the source (``ast``), not from an import at run time: every
import of a ``specmd_sim`` module is an edge, at module level, inside a function and under
``if TYPE_CHECKING:`` alike. A lazy or type-only import that dodges a cycle at run time is still
a cycle in the design: the two modules cannot be understood, tested or moved apart. Relative
imports are resolved, and ``from pkg import name`` points at the submodule ``pkg.name`` where
there is one, else at ``pkg`` (its ``__init__``). Importing ``a.b.c`` also runs the
``__init__`` of ``a`` and ``a.b``; that is not counted as an edge (else every module would import
the public API at the top), which is why a package's ``__init__`` must stay light.

Layer order, lowest first; a module may import modules of its own layer and of the layers below
(each top-level module or subpackage of ``specmd_sim`` is one layer, the package's own
``__init__`` is ``__init__``):

- ``errors``, ``units``, ``_data``, ``schema_base`` — vocabulary every layer may use: the error
  type, the time unit and byte helpers, where bundled data lies, the base of every input
  schema; ``atomic`` (files written whole), ``packed_rows`` (rows packed into arrays,
  spilled to disk past a bound), ``protowire`` (protobuf messages written a column at a
  time) and ``gz`` (gzip files written a chunk at a time), tools of the same kind.
- ``hardware`` < ``models`` < ``traces`` — the inputs: the cost model of ``models`` reads the
  hardware schema; the synthetic trace generator reads a model's shape.
- ``cache`` — the state machine; it knows an eviction policy only as an object with hooks.
- ``policies`` — the plug-ins and their registry; they read the cache, the hardware, the model
  and the trace, never the scenario that owns them.
- ``config`` — above ``policies``, not among the foundations: SimConfig's policy fields are the
  discriminated unions that the plug-in registry builds (``policies.registry``).
- ``scenario`` — resolves a config into passes, placement and plug-in objects (below engine).
- ``metric_spec`` < ``timeline`` < ``metrics`` < ``metric_docs`` — the vocabulary of results,
  below ``engine`` because the engines produce it: they record spans (``timeline``) and return
  a ``RunResult`` (``metrics``, which checks its names against ``metric_spec``). Above
  ``scenario`` so that no input of a run (policies, config, scenario) depends on its results.
  A RunResult carries spans, spans know no RunResult; the specification knows neither, and
  its documentation generator (``metric_docs``) may read all three.
- ``engine`` — the layer step and the drivers.
- ``execute`` — the real executor: the engine's layer step and accounting, fulfilled for real.
- ``perfetto`` — the spans as a Perfetto trace (beside ``timeline``'s Chrome JSON), its span
  packets by a compiled loop where numba is installed (``engine.jit``).
- ``runs`` — run folders (config, result, spans, Chrome trace): data files only; the HTML
  page ``timeline.html`` is written by the report layer, above it.
- ``report`` — figures and pages (plotly); it reads run folders (``runs.read_spans``).
- ``sweep`` — grids of runs; names points by config hash (``runs``), not by pages.
- ``regress`` — baselines over runs and sweeps; ``reproduce`` — the paper's study.
- ``__init__`` — the public API: it re-exports the library (its highest import is ``sweep``),
  so nothing in the library may import it (``__version__`` included).
- ``cli``, ``pytest_plugin``, ``__main__`` — clients of the public API, shipped in the same
  wheel: the CLI is "a thin typer CLI over the API" (DESIGN.md §3), the pytest plugin runs the
  public ``simulate``/``replay`` like a user's test would, and ``python -m specmd_sim`` is the
  CLI.

Run alone: ``pytest tests/test_layering.py``. A new top-level module fails
:func:`test_every_module_has_a_layer` until it is placed in :data:`LAYERS`.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from operator import attrgetter
from pathlib import Path

import networkx as nx

PACKAGE = "specmd_sim"
ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / PACKAGE

LAYERS = (
    "errors", "units", "_data", "schema_base", "atomic", "packed_rows", "protowire", "gz",
    "hardware", "runtime", "models", "traces",
    "cache", "policies", "config", "scenario",
    "metric_spec", "timeline", "metrics", "metric_docs",
    "engine", "execute", "record",
    "perfetto", "runs", "report", "sweep", "regress", "reproduce", "validate",
    "__init__",
    "cli", "pytest_plugin", "__main__",
)  # fmt: skip
RANK = {name: i for i, name in enumerate(LAYERS)}

# DESIGN.md §3: the core imports no plotting, no CLI and no distributed engine, nor the table
# libraries of the sweep store; neither may anything the core imports.
CORE = ("cache", "policies", "engine", "scenario", "hardware", "runtime", "models", "traces")
HEAVY = ("plotly", "typer", "rich", "ray", "pandas", "pyarrow")


@dataclass(frozen=True)
class Import:
    module: str  # the importing module
    target: str  # what it imports: a module of the package, or a third-party top-level name
    where: str  # file:line of the statement


@cache
def module_files(source: Path = SOURCE) -> dict[str, Path]:
    """Every module of the package in ``source`` by dotted name (a package by its own name)."""
    files = {}
    for path in sorted(source.rglob("*.py")):
        parts = path.relative_to(source.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        files[".".join(parts)] = path
    return files


@cache
def imports_of(module: str, source: Path = SOURCE) -> tuple[list[Import], list[Import]]:
    """(imports of the package's modules, imports of third-party top-level packages) that
    ``module`` makes anywhere in its file."""
    modules = module_files(source)
    path = modules[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    ours: set[Import] = set()
    theirs: set[Import] = set()

    def add(name: str, line: int) -> None:
        where = f"{path.relative_to(source.parent)}:{line}"
        top = name.split(".")[0]
        if top == source.name:
            while name not in modules and "." in name:  # an import of a module now gone
                name = name.rpartition(".")[0]
            if name != module:
                ours.add(Import(module, name, where))
        elif top not in sys.stdlib_module_names:
            theirs.add(Import(module, top, where))

    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = parts[: len(parts) - node.level + 1]
                origin = ".".join([*base, node.module] if node.module else base)
            else:
                origin = node.module or ""
            for alias in node.names:
                sub = f"{origin}.{alias.name}"
                add(sub if sub in modules else origin, node.lineno)
    order = attrgetter("where", "target")
    return sorted(ours, key=order), sorted(theirs, key=order)


@cache
def graph(source: Path = SOURCE) -> nx.DiGraph:
    """Modules as nodes (with their third-party imports); an edge per importing pair, with its
    import statements."""
    g = nx.DiGraph()
    for module in module_files(source):
        ours, theirs = imports_of(module, source)
        g.add_node(module, third_party=theirs)
        for imp in ours:
            if not g.has_edge(imp.module, imp.target):
                g.add_edge(imp.module, imp.target, imports=[])
            g.edges[imp.module, imp.target]["imports"].append(imp)
    return g


def layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _edge_text(u: str, v: str) -> str:
    return f"{u} ({graph().edges[u, v]['imports'][0].where})"


def test_the_walk_sees_every_kind_of_import(tmp_path: Path) -> None:
    """A control on a made-up package: module-level, lazy, type-only and relative imports,
    ``from pkg import submodule`` and ``from pkg import name`` all become the right edges."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    files = {
        "__init__.py": "from pkg.low import VALUE\n",
        "low.py": "import numpy as np\nVALUE = 1\n",
        "sub/__init__.py": "from . import leaf\n",
        "sub/leaf.py": (
            "from typing import TYPE_CHECKING\n"
            "from .. import low\n"
            "from ..low import VALUE\n"
            "if TYPE_CHECKING:\n    import pkg.mid\n"
            "def f():\n    from pkg import mid, VALUE\n    import plotly.graph_objects\n"
        ),
        "mid.py": "import pkg.sub.leaf\n",
    }
    for name, text in files.items():
        (pkg / name).write_text(text)
    g = graph(pkg)
    assert sorted(g.edges) == [
        ("pkg", "pkg.low"), ("pkg.mid", "pkg.sub.leaf"), ("pkg.sub", "pkg.sub.leaf"),
        ("pkg.sub.leaf", "pkg"), ("pkg.sub.leaf", "pkg.low"), ("pkg.sub.leaf", "pkg.mid"),
    ]  # fmt: skip
    assert [i.where for i in g.edges["pkg.sub.leaf", "pkg.mid"]["imports"]] == [
        "pkg/sub/leaf.py:5", "pkg/sub/leaf.py:7",
    ]  # fmt: skip
    assert [(i.target, i.where) for i in g.nodes["pkg.sub.leaf"]["third_party"]] == [
        ("plotly", "pkg/sub/leaf.py:8"),
    ]
    assert [i.target for i in g.nodes["pkg.low"]["third_party"]] == ["numpy"]


def test_every_module_has_a_layer() -> None:
    unplaced = sorted({layer(m) for m in module_files()} - set(LAYERS))
    assert not unplaced, f"place these in LAYERS of {Path(__file__).name}: {unplaced}"


def test_no_import_cycles() -> None:
    """Each cycle is printed with the import that makes each of its steps; every edge of a
    strongly connected component lies on one of the (shortest) cycles shown."""
    g = graph()
    cycles: set[tuple[str, ...]] = set()
    for component in nx.strongly_connected_components(g):
        sub = g.subgraph(component)
        for u, v in sub.edges:
            cycle = [u, *nx.shortest_path(sub, v, u)[:-1]]
            start = cycle.index(min(cycle))
            cycles.add(tuple(cycle[start:] + cycle[:start]))
    lines = [
        " -> ".join(_edge_text(a, b) for a, b in zip(c, c[1:] + c[:1], strict=True)) + f" -> {c[0]}"
        for c in sorted(cycles, key=lambda c: (len(c), c))
    ]
    assert not lines, f"{len(lines)} import cycles:\n" + "\n".join(lines)


def test_no_upward_imports() -> None:
    violations = [
        f"{imp.where}: {u} ({layer(u)}) imports {v} ({layer(v)}, a higher layer)"
        for u, v, data in graph().edges(data=True)
        if RANK.get(layer(v), -1) > RANK.get(layer(u), len(LAYERS))
        for imp in data["imports"]
    ]
    assert not violations, f"{len(violations)} upward imports:\n" + "\n".join(sorted(violations))


def test_the_core_imports_nothing_heavy() -> None:
    """Neither the core nor anything it imports, directly or not, imports plotting, the CLI,
    Ray or the table libraries."""
    g = graph()
    core = [m for m in g if layer(m) in CORE]
    found: dict[tuple[str, str], tuple[Import, list[str]]] = {}
    for start in core:
        for module, path in nx.single_source_shortest_path(g, start).items():
            for imp in g.nodes[module]["third_party"]:  # the first import of each name
                if imp.target in HEAVY and (module, imp.target) not in found:
                    found[module, imp.target] = (imp, path)
    lines = [
        f"{imp.where}: imports {imp.target} (reached by {' -> '.join(path)})"
        for imp, path in found.values()
    ]
    assert not lines, "the core reaches heavy imports:\n" + "\n".join(sorted(lines))


def test_importing_the_api_and_the_pytest_plugin_is_light() -> None:
    """``import specmd_sim`` and the pytest plugin (which every pytest session of an installed
    specmd-sim loads, through its ``pytest11`` entry point) load no engine, no SimPy, and none
    of the heavy packages; the public names load on first use."""
    heavy = sorted({*HEAVY, "simpy", f"{PACKAGE}.engine"})
    code = (
        "import json, sys, specmd_sim, specmd_sim.pytest_plugin\n"
        f"heavy = {heavy!r}\n"
        "print(json.dumps(sorted(m for m in sys.modules"
        " if any(m == h or m.startswith(h + '.') for h in heavy))))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []

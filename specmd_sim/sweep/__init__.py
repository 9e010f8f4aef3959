"""Sweeps: many runs over a grid of configs, resumable, on this machine or on Ray.

- :mod:`.spec` — the sweep spec (YAML): base config, axes (product) and zip groups, engine;
- :mod:`.grid` — its expansion into points: resolved configs, axis values, content-hash ids,
  counted before they are built and built one at a time;
- :mod:`.store` — the results table: one parquet file per finished point, written atomically,
  read with ``pandas.read_parquet(DIR)``;
- :mod:`.executors` — where points run: a local process pool or a Ray cluster;
- :mod:`.search` — a spec's rate search: at each point, the highest Poisson arrival rate whose
  SLO attainment meets a target;
- :mod:`.smallest` — a spec's capacity search: at each point, the smallest cache (or link, or
  any numeric knob) at which a metric meets a target;
- :mod:`.runner` — :func:`run_sweep`: check the grid's size and the folder, skip what is done,
  run the rest, store each row at once (and, with ``keep_runs``, each point's run folder).

``docs/sweeps.md`` describes the spec, the table and the guarantees.
"""

from specmd_sim.sweep.grid import Point, count_points, expand, iter_points
from specmd_sim.sweep.runner import PointDone, SweepSummary, point_row, run_sweep
from specmd_sim.sweep.search import RateSearch, search_rate
from specmd_sim.sweep.smallest import SmallestSearch, search_smallest
from specmd_sim.sweep.spec import SweepSpec, load_spec, parse_spec
from specmd_sim.sweep.store import export_csv, load_table, read_rows

__all__ = [
    "Point",
    "PointDone",
    "RateSearch",
    "SmallestSearch",
    "SweepSpec",
    "SweepSummary",
    "count_points",
    "expand",
    "export_csv",
    "iter_points",
    "load_spec",
    "load_table",
    "parse_spec",
    "point_row",
    "read_rows",
    "run_sweep",
    "search_rate",
    "search_smallest",
]

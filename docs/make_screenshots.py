"""Make the screenshots of docs/timelines.md with the project's own pages and a headless
Chromium: ``python docs/make_screenshots.py`` (about a minute; needs the Debian package
``chromium``). It simulates the default job and a few small grids, writes the pages into a
temporary folder, and saves one PNG per figure in ``docs/img/``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from specmd_sim import SimConfig, replay, simulate
from specmd_sim.report import RunData, layer_figure, timeline_figure, write_timeline
from specmd_sim.report.compare import write_compare
from specmd_sim.report.html import Block, write_page
from specmd_sim.report.rows import load_rows, plan
from specmd_sim.report.run_report import write_run_report
from specmd_sim.runs import TIMELINE_FILE, write_run

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # the headless-Chromium driver is a test helper
from support.browser import Browser  # noqa: E402

IMG = Path(__file__).resolve().parent / "img"
WIDTH = 1200


def first_decode_window(run: RunData, passes: int = 2) -> tuple[float, float]:
    """The first ``passes`` decode passes of the first request."""
    table = run.passes
    decode = table[(table["phase"] == 1) & (table["request"] == table["request"][0])]
    return float(decode["start"][0]), float(decode["end"][passes - 1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=IMG, help="folder for the PNGs")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        # page -> the PNG name of each of its figures, in order (None: not pictured)
        pages: dict[str, tuple[Path, list[str | None]]] = {}

        # the default job: OLMoE-shaped trace, h100-pcie, 5 % cache, least-stale + top-k
        run_dir = root / "default"
        write_run(run_dir, simulate(SimConfig()))
        run = RunData.load(run_dir)
        write_timeline(run, run_dir / TIMELINE_FILE)
        pages["timeline"] = (run_dir / "timeline.html", ["timeline", None])
        window = first_decode_window(run)
        write_page(
            root / "zoom.html",
            "zoom",
            [
                Block("zoom", figures=timeline_figure(run, window=window)),
                Block("layers", figures=layer_figure(run, window=window)),
            ],
        )
        pages["zoom"] = (root / "zoom.html", ["timeline-decode", "layers-decode"])
        write_run_report(run, root / "report.html")
        pages["report"] = (
            root / "report.html",
            ["report-taxonomy", None, "report-stall", "report-ttft"],
        )

        # hit rate against capacity: three eviction policies, with and without prefetching,
        # timing-free
        grid = []
        for eviction in ("lru", "least-stale", "fifo"):
            for prefetch in ("none", "top-k"):
                for capacity in ("4%", "8%", "12%", "16%", "20%"):
                    cfg = SimConfig(cache={"capacity": capacity}, eviction={"kind": eviction},
                                    prefetch={"kind": prefetch})  # fmt: skip
                    grid.append(root / f"replay-{eviction}-{prefetch}-{capacity}")
                    write_run(grid[-1], replay(cfg))
        write_compare(plan(load_rows(grid)), root / "capacity.html", [str(p) for p in grid])
        pages["capacity"] = (root / "capacity.html", ["compare-capacity", None])

        # TTFT against link bandwidth: two policies on three machines, one request each
        grid = []
        for hardware in ("slow-link-5gbps", "h100-pcie", "gh200"):
            for prefetch in ("none", "top-k"):
                cfg = SimConfig(hardware=hardware, prefetch={"kind": prefetch},
                                workload={"max_requests": 1})  # fmt: skip
                grid.append(root / f"sim-{hardware}-{prefetch}")
                write_run(grid[-1], simulate(cfg))
        write_compare(plan(load_rows(grid)), root / "bandwidth.html", [str(p) for p in grid])
        pages["bandwidth"] = (root / "bandwidth.html", ["compare-bandwidth"])

        with Browser(width=WIDTH, height=900) as browser:
            for path, names in pages.values():
                page = browser.open(path)
                page.plots()
                if page.errors:
                    raise SystemExit(f"{path.name}: {page.errors}")
                for i, name in enumerate(names, start=1):
                    if name is None:
                        continue
                    out = args.out / f"{name}.png"
                    page.screenshot(out, selector=f"#fig-{i}")
                    print(f"wrote {out}")


if __name__ == "__main__":
    main()

"""Run folders: every run writes its resolved config and results, atomically.

``RUN_DIR/config.yaml`` (the resolved config), ``RUN_DIR/result.json``, and for the timing
engine ``RUN_DIR/trace.json`` (Chrome/Perfetto) and ``RUN_DIR/timeline.html``. The default
folder is ``runs/<engine>-<hash>``, the hash of the resolved config, so re-running the same
config overwrites identical results instead of piling up copies.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import yaml

from specmd_sim.config import SimConfig, config_to_dict
from specmd_sim.metrics import RunResult
from specmd_sim.timeline import write_chrome_trace


def config_hash(config: SimConfig) -> str:
    text = json.dumps(config_to_dict(config), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def default_run_dir(engine: str, config: SimConfig) -> Path:
    return Path("runs") / f"{engine}-{config_hash(config)}"


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def write_run(run_dir: Path, result: RunResult, timeline_html: bool = True) -> dict[str, Path]:
    """Write the run folder; returns the files written by name."""
    run_dir.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path] = {}
    files["config"] = run_dir / "config.yaml"
    _atomic_write(files["config"], yaml.safe_dump(result.config, sort_keys=True))
    files["result"] = run_dir / "result.json"
    result.write(files["result"])
    if result.spans is not None:
        files["trace"] = run_dir / "trace.json"
        write_chrome_trace(files["trace"], result.spans, result.lanes)
        if timeline_html:
            from specmd_sim.report import timeline_figure, write_timeline_html

            files["timeline"] = run_dir / "timeline.html"
            title = f"{result.inputs['model']} on {result.inputs['hardware']} — " + (
                f"{result.config['eviction']['kind']} + {result.config['prefetch']['kind']}"
            )
            fig = timeline_figure(
                result.spans, result.lanes, title=title, ttft_s=result.metrics.get("ttft_s")
            )
            write_timeline_html(files["timeline"], fig)
    return files


def load_run_config(run_dir: Path) -> dict[str, Any]:
    return yaml.safe_load((run_dir / "config.yaml").read_text())

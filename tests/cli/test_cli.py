"""The command line as a user runs it: exit codes, stdout/stderr contracts (in this process,
through the entry point; one test starts ``python -m specmd_sim`` itself)."""

from __future__ import annotations

import functools
import gc
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from support.cli import Completed, run_specmd

import specmd_sim.engine.sim.run as sim_run
from specmd_sim.hardware import load_profile
from specmd_sim.timeline import SpanRecorder
from specmd_sim.traces.io import bundled_trace_path

SMALL = ["--trace", "mixtral-synthetic", "--set", "workload.max_requests=1", "--cache", "8"]


def specmd(*args: str, cwd: Path | None = None) -> Completed:
    """The command in this process (``python -m specmd_sim`` itself: ``test_module_entry``)."""
    return run_specmd(*args, cwd=cwd)


def assert_user_error(proc: Completed, *fragments: str) -> str:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def test_run_json_prints_one_object_and_writes_the_run_folder(tmp_path: Path) -> None:
    proc = specmd("run", *SMALL, "--json", "--out", str(tmp_path / "run"))
    assert proc.returncode == 0, proc.stderr
    metrics = json.loads(proc.stdout)  # exactly one JSON document, nothing else
    for key in (
        "accesses", "hits", "misses", "misses_compulsory", "misses_capacity", "misses_collision",
        "hit_rate", "prefetch_issued", "prefetch_used", "prefetch_wasted", "bytes_demand",
        "bytes_prefetch", "late_hits", "ttft_s", "tpot_s", "stall_s", "makespan_s",
    ):  # fmt: skip
        assert key in metrics, key
    files = {p.name for p in (tmp_path / "run").iterdir()}
    assert files == {"config.yaml", "result.json", "spans.npz", "trace.pftrace.gz", "timeline.html",
                     "manifest.json"}  # fmt: skip
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert result["metrics"] == metrics
    config = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert config["eviction"] == {"kind": "least-stale", "order": "fifo"}


def test_a_hardware_what_if_in_one_command(tmp_path: Path) -> None:
    """`--set hardware.<path>=<value with unit>`: the run says so, records it in its config,
    and is slower on a slower link; a wrong path is one line naming the ids there are."""
    fast = specmd("run", *SMALL, "--json", "--out", str(tmp_path / "a"))
    slow = specmd("run", *SMALL, "--set", "hardware.links.pcie0.bandwidth_bytes_per_s=8GB/s",
                  "--out", str(tmp_path / "b"))  # fmt: skip
    assert slow.returncode == 0, slow.stderr
    assert "what-if: hardware h100-pcie with links.pcie0.bandwidth_bytes_per_s=8GB/s" in slow.stdout
    config = yaml.safe_load((tmp_path / "b" / "config.yaml").read_text())
    assert config["hardware_set"] == {"links.pcie0.bandwidth_bytes_per_s": "8GB/s"}
    result = json.loads((tmp_path / "b" / "result.json").read_text())
    assert result["metrics"]["tpot_s"] > json.loads(fast.stdout)["tpot_s"]
    assert result["hardware_grade"] == "D"  # a what-if is an assumption
    wrong = specmd("run", *SMALL, "--set", "hardware.links.pcie1.bandwidth_bytes_per_s=8GB/s")
    assert_user_error(wrong, "hardware_set (profile h100-pcie): links.pcie1: expected an item id "
                      "among pcie0, nvme-pcie0")  # fmt: skip


def test_run_on_more_gpus_than_requests_shows_each_gpu(tmp_path: Path) -> None:
    proc = specmd(
        "run", "--hardware", "hgx-h100-8gpu", "--set", "parallel.gpus=4",
        "--set", "workload.max_requests=2", "--set", "timing.record_spans=false",
        "--out", str(tmp_path / "run"),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rows = [line for line in proc.stdout.splitlines() if line.startswith("│ gpu")]
    assert [row.split()[1] for row in rows] == ["gpu0", "gpu1", "gpu2", "gpu3"]
    assert "note: 2 of 4 GPUs served no request (the run has 2 requests)" in proc.stdout
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert result["per_gpu"]["requests"] == [1, 1, 0, 0]
    assert result["per_gpu"]["hit_rate"][2:] == [None, None]


def test_replay_json(tmp_path: Path) -> None:
    proc = specmd("replay", *SMALL, "--eviction", "lru", "--json", "--out", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stderr
    metrics = json.loads(proc.stdout)
    assert "ttft_s" not in metrics and metrics["accesses"] > 0


def test_run_and_replay_leave_the_cycle_collector_as_they_found_it(tmp_path: Path) -> None:
    """They turn it off for their set-up and freeze what it made during the run: in this
    process all is back after a run and after a user error alike."""
    for args in (("run", *SMALL), ("replay", *SMALL), ("replay", "--cache", "-1")):
        proc = specmd(*args, "--out", str(tmp_path / "r"), "--json")
        assert gc.isenabled() and gc.get_freeze_count() == 0, (args, proc.stderr)
    assert proc.returncode == 2


@pytest.mark.parametrize(
    ("args", "code"), [(("policies", "list"), 0), (("replay", "--cache", "-1"), 2)]
)
def test_the_process_ends_with_its_exit_code_and_its_objects_frozen(args, code) -> None:
    """``process_main`` (the console script, ``python -m specmd_sim``) exits as ``main`` does,
    with what it made frozen for the exit (so the last cycle collection skips it)."""
    script = (
        "import atexit, gc, sys\n"
        "atexit.register(lambda: print('frozen', gc.get_freeze_count() > 10_000))\n"
        "from specmd_sim.cli import process_main\n"
        f"sys.argv = ['specmd', *{list(args)!r}]\n"
        "process_main()\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == code, proc.stderr
    assert proc.stdout.splitlines()[-1] == "frozen True", proc.stdout


@pytest.mark.parametrize(("setting", "loaded"), [(None, False), ("", True), ("logfire", True)])
def test_the_process_loads_no_pydantic_plugins_unless_told_to(setting, loaded) -> None:
    """``process_main`` sets pydantic's own switch off unless the environment sets it (an empty
    value, or naming the plug-ins to skip, loads the others); pydantic then looks for none."""
    script = (
        "import atexit, os, sys\n"
        "import pydantic.plugin._loader as plugins\n"
        "atexit.register(lambda: print(plugins._plugins is not None))\n"
        "from specmd_sim.cli import process_main\n"
        "sys.argv = ['specmd', 'models', 'list', '--json']\n"
        "process_main()\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    if setting is not None:
        env["PYDANTIC_DISABLE_PLUGINS"] = setting
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == str(loaded), proc.stdout


@pytest.mark.parametrize(
    ("setting", "set_here"),
    [
        ({}, (True, True)),
        ({"MALLOC_ARENA_MAX": "4"}, (False, True)),
        ({"GLIBC_TUNABLES": "glibc.malloc.arena_max=4"}, (False, True)),
        ({"MALLOC_MMAP_MAX_": "65536"}, (True, False)),
        ({"MALLOC_TRIM_THRESHOLD_": "131072"}, (True, False)),
        ({"MALLOC_MMAP_THRESHOLD_": "131072"}, (True, False)),
        ({"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=131072"}, (True, False)),
    ],
)
def test_the_allocator_set_unless_told_otherwise(setting, set_here) -> None:
    """glibc's malloc keeps one arena (as ``MALLOC_ARENA_MAX=1``) unless the environment says
    how many, and what is freed unless it sets how (the mmap and trim settings): then a block
    of 64 MiB comes from the heap, where glibc would map it on its own (``mallinfo``'s
    ``hblks``, the blocks mapped so: glibc's ``mallopt`` answers 1 even for a parameter it
    does not know). On another C library the allocator is left alone."""
    from specmd_sim import cli

    if not cli._glibc():
        assert (cli.one_malloc_arena(), cli.keep_freed_memory()) == (False, False)
        return
    script = (
        "import ctypes\n"
        "from specmd_sim.cli import keep_freed_memory, one_malloc_arena\n"
        "print(one_malloc_arena(), keep_freed_memory())\n"
        "libc = ctypes.CDLL(None)\n"
        "name = 'mallinfo2' if hasattr(libc, 'mallinfo2') else 'mallinfo'\n"
        "field = ctypes.c_size_t if name == 'mallinfo2' else ctypes.c_int\n"
        "class Info(ctypes.Structure):\n"
        "    _fields_ = [(f, field) for f in ('arena', 'ordblks', 'smblks', 'hblks', 'hblkhd',\n"
        "                'usmblks', 'fsmblks', 'uordblks', 'fordblks', 'keepcost')]\n"
        "info = getattr(libc, name)\n"
        "info.restype = Info\n"
        "libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]\n"
        "before = info().hblks\n"
        "block = libc.malloc(64 << 20)\n"
        "print(info().hblks == before)\n"
    )
    told = ("MALLOC_", "GLIBC_TUNABLES")
    env = {k: v for k, v in os.environ.items() if not k.startswith(told)}
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env={**env, **setting}
    )
    assert proc.returncode == 0, proc.stderr
    said, from_the_heap = proc.stdout.splitlines()
    assert said.split() == [str(s) for s in set_here]
    assert from_the_heap == str(set_here[1])


@pytest.mark.parametrize(
    ("setting", "set_here", "asked"),
    [({}, True, "False"), ({"NUMPY_MADVISE_HUGEPAGE": "1"}, False, "True")],
)
def test_numpy_asks_for_no_huge_pages_unless_told(setting, set_here, asked) -> None:
    """numpy is told to ask for no transparent huge pages (its own switch, read as it is
    imported, obeyed on every system) unless the environment says."""
    script = (
        "from specmd_sim.cli import no_numpy_huge_pages\n"
        "print(no_numpy_huge_pages())\n"
        "import numpy\n"
        "core = getattr(numpy, '_core', None) or numpy.core\n"
        "print(bool(core.multiarray._get_madvise_hugepage()))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "NUMPY_MADVISE_HUGEPAGE"}
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env={**env, **setting}
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [str(set_here), asked]


def test_numpy_is_not_told_once_imported() -> None:
    """Once numpy is imported its switch is no longer read: nothing is set (the environment
    left as it was, for the process's children too)."""
    script = (
        "import os\n"
        "import numpy\n"
        "from specmd_sim.cli import no_numpy_huge_pages\n"
        "print(no_numpy_huge_pages(), 'NUMPY_MADVISE_HUGEPAGE' in os.environ)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "NUMPY_MADVISE_HUGEPAGE"}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "False"]


def test_the_cli_imports_no_numpy() -> None:
    """``specmd_sim.cli`` imports no numpy, so that ``process_main`` prepares the process
    (numpy's switch among it) before numpy is imported."""
    script = "import sys\nimport specmd_sim.cli\nprint('numpy' in sys.modules)\n"
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"


@pytest.mark.parametrize(
    ("command", "prepared"), [("run", True), ("replay", True), ("policies", False)]
)
def test_the_process_is_prepared_for_run_and_replay_only(command, prepared) -> None:
    """``process_main`` sets the allocator (one arena, what is freed kept) and numpy's huge
    pages for ``run`` and ``replay`` (whose run folders' writer threads it is for), and none of
    them for the other commands (a recording's torch threads among them)."""
    said = ["one arena", "freed kept", "no huge pages"]
    script = (
        "import sys\n"
        "import specmd_sim.cli as cli\n"
        f"cli.one_malloc_arena = lambda: print({said[0]!r}) or True\n"
        f"cli.keep_freed_memory = lambda: print({said[1]!r}) or True\n"
        f"cli.no_numpy_huge_pages = lambda: print({said[2]!r}) or True\n"
        f"sys.argv = ['specmd', {command!r}, '--help']\n"
        "cli.process_main()\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert [line for line in lines if line in said] == (said if prepared else []), lines[:5]


def test_the_run_folders_writers_are_loaded_beside_the_engine(monkeypatch) -> None:
    """``specmd run`` starts loading the run folder's compiled writers on a thread at the
    engine's first progress report (its own code loaded by then), passes each report on to the
    progress bar, and joins the thread before the folder is written; a run without spans (or a
    replay) loads none."""
    import threading

    from specmd_sim.cli import run as run_cli

    loaded: list[str] = []
    monkeypatch.setattr(
        run_cli, "_prepare_outputs", lambda: loaded.append(threading.current_thread().name)
    )
    reports: list[tuple[int, int]] = []
    with run_cli._preparing_outputs(lambda done, total: reports.append((done, total)), True) as p:
        assert p is not None
        assert not loaded  # (nothing before the engine reports)
        p(1, 10)
        p(5, 10)
    assert loaded == ["prepare-outputs"] and reports == [(1, 10), (5, 10)]
    with run_cli._preparing_outputs(None, True) as p:  # (no bar: the reports still start it)
        assert p is not None
        p(1, 2)
    assert loaded == ["prepare-outputs"] * 2
    bar = reports.append
    with run_cli._preparing_outputs(bar, False) as p:  # type: ignore[arg-type]
        assert p is bar
    assert len(loaded) == 2


def test_same_config_gives_byte_identical_results(tmp_path: Path) -> None:
    for name in ("a", "b"):
        proc = specmd("run", *SMALL, "--seed", "5", "--out", str(tmp_path / name))
        assert proc.returncode == 0, proc.stderr
    for name in ("result.json", "spans.npz", "trace.pftrace.gz", "timeline.html", "config.yaml"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


def test_spans_spilled_to_disk_give_the_same_run_folder(tmp_path: Path, monkeypatch) -> None:
    """A recording spilled every 4 KB (its results mapped from the merged files) writes the
    same run folder as one kept in memory."""
    proc = specmd("run", *SMALL, "--out", str(tmp_path / "memory"))
    assert proc.returncode == 0, proc.stderr
    made: list[SpanRecorder] = []
    spilled = functools.partial(SpanRecorder, spill_bytes=4096)
    monkeypatch.setattr(sim_run, "SpanRecorder", lambda *a: made.append(spilled(*a)) or made[-1])
    proc = specmd("run", *SMALL, "--out", str(tmp_path / "spilled"))
    assert proc.returncode == 0, proc.stderr
    assert made[0]._spans._folder is not None  # it did spill
    for name in ("result.json", "spans.npz", "trace.pftrace.gz", "timeline.html"):
        want = (tmp_path / "memory" / name).read_bytes()
        assert (tmp_path / "spilled" / name).read_bytes() == want, name


def test_set_overrides_reach_the_config(tmp_path: Path) -> None:
    proc = specmd(
        "replay", *SMALL, "--set", "eviction.order=layer", "--set", "predictor.kind=noisy-oracle",
        "--set", "predictor.accuracy=0.5",
        "--out", str(tmp_path / "r"),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    config = yaml.safe_load((tmp_path / "r" / "config.yaml").read_text())
    assert config["eviction"]["order"] == "layer"
    assert config["predictor"]["kind"] == "noisy-oracle"
    assert config["predictor"]["accuracy"] == 0.5


# --- bad input: one line, exit 2 -------------------------------------------------------------


def _profile_file(tmp_path: Path, mutate) -> Path:
    data = load_profile("h100-pcie").model_dump(mode="json")
    mutate(data)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_profile_missing_field(tmp_path: Path) -> None:
    path = _profile_file(tmp_path, lambda d: d["nodes"][0].pop("hbm_bytes"))
    for args in (("hardware", "validate", str(path)), ("run", *SMALL, "--hardware", str(path))):
        assert_user_error(specmd(*args), str(path), "hbm_bytes", "required field is missing")


def test_profile_negative_field(tmp_path: Path) -> None:
    path = _profile_file(
        tmp_path, lambda d: d["links"][0]["bandwidth_bytes_per_s"].update(value=-5)
    )
    assert_user_error(
        specmd("hardware", "validate", str(path)),
        "bandwidth_bytes_per_s",
        "greater than or equal to 1",
        "-5",
    )


def test_trace_with_out_of_range_expert(tmp_path: Path, write_trace) -> None:
    ids = np.zeros((2, 32, 2), np.int16)
    ids[:, :, 1] = 1
    ids[1, 4, 1] = 8  # mixtral has experts 0..7
    import specmd_sim.traces.trace as trace_mod

    arrays = {"experts": ids, "request": np.zeros(2, np.int32), "phase": np.ones(2, np.uint8)}
    meta = {"format": "specmd-trace", "version": 1, "model": "mixtral-8x7b", "num_layers": 32,
            "num_experts": 8, "top_k": 2}  # fmt: skip
    path = tmp_path / "bad.npz"
    np.savez(path, meta=np.array(json.dumps(meta)), **arrays)
    with pytest.raises(Exception, match="expert ids in"):
        trace_mod.validate_trace(arrays, meta, "t")
    assert_user_error(
        specmd("replay", "--trace", str(path)),
        str(path), "experts", "expected expert ids in [-1, 7]", "got 8 at token 1, layer 4",
    )  # fmt: skip


def test_a_miss_handler_that_never_fetches_needs_no_room_for_a_demand_set(tmp_path: Path) -> None:
    """cpu-execute always (kTransformers) and drop pin no missing expert: the same whole-prompt
    prefill beside a 7-slot cache runs, and no missing expert is fetched on demand."""
    args = ("run", "--cache", "7", "--set", "workload.prefill_chunk_tokens=0",
            "--set", "workload.max_requests=1", "--json")  # fmt: skip
    for name, miss in (
        ("cpu", ("miss.kind=cpu-execute", "miss.mode=always")),
        ("drop", ("miss.kind=drop",)),
    ):
        sets = [a for m in miss for a in ("--set", m)]
        proc = specmd(*args, *sets, "--out", str(tmp_path / name))
        assert proc.returncode == 0, proc.stderr
        metrics = json.loads(proc.stdout)
        assert metrics["bytes_demand"] == 0  # (prefetches still fill the cache)


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (("run", "--eviction", "lru2"), ("eviction.kind", "expected one of", "'lru2'")),
        (("run", "--cache", "5 parsecs"), ("cache.capacity", "5 parsecs")),
        (("run", "--cache", "0%"), ("cache.capacity", "percentage")),
        (("run", "--set", "cache.nope=1"), ("cache.nope", "extra")),
        (("run", "--set", "noequals"), ("--set", "KEY.PATH=VALUE")),
        (("run", "--hardware", "h999"), ("hardware profile", "'h999'")),
        (("run", "--trace", "missing.npz"), ("trace", "missing.npz")),
        (("run", "--model", "mixtral-8x7b"), ("num_layers", "expected 32", "got 16")),
        (("run", "--trace", "mixtral-synthetic", "--cache", "100%"), ("cache.capacity", "HBM")),
        (("models", "show", "gpt-5"), ("model", "gpt-5")),
        (("reproduce", "nope"), ("study", "expected one of specmd", "'nope'")),
        (("run", "--set", "miss.kind=pray"), ("miss.kind", "'pray'")),
        (("reproduce", "specmd", "--workers", "-3"), ("--workers: expected at least 1, got -3",)),
        (("reproduce", "specmd", "--workers", "0"), ("--workers: expected at least 1, got 0",)),
        (("run", "--cache", "5.5"), ("cache.capacity", "whole number of expert slots", "'5.5'")),
        (("run", "--cache", "1e9"), ("cache.capacity", "size with its unit", "'1e9'")),
        (
            ("run", "--set", "workload.arrival_rate_per_s=2"),
            ("arrival_rate_per_s: expected none with arrivals: closed-loop", "got 2"),
        ),
        (
            ("trace", "info", "olmoe-synthetic", "--predictor", "nope"),
            ("--predictor and --set", "predictor.kind", "'nope'"),
        ),
        (
            ("run", "--set", "workload.requests=[7]"),
            ("workload.requests", "request ids of trace olmoe-synthetic", "[7]"),
        ),
    ],
)
def test_bad_input_is_one_line(args: tuple[str, ...], fragments: tuple[str, ...]) -> None:
    assert_user_error(specmd(*args), *fragments)


@pytest.mark.parametrize("option", ["--out", "--trace", "--hardware"])
def test_a_name_longer_than_the_file_system_holds_is_one_line(option: str, tmp_path: Path):
    """A path component over 255 bytes (ENAMETOOLONG), as an output or an input: the path and
    the system's reason in one line, not an OSError's traceback."""
    long = str(tmp_path / ("b" * 256))
    args = ["--out", long] if option == "--out" else [option, long, "--out", str(tmp_path / "r")]
    line = assert_user_error(specmd("run", *args), "b" * 256, "too long")
    assert line.startswith("error: --out: expected a folder" if option == "--out" else "error: ")


def test_malformed_yaml_config(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("cache: {capacity: [5%\n")
    assert_user_error(specmd("run", "--config", str(path)), str(path), "malformed YAML", "line")


# --- catalog commands ------------------------------------------------------------------------


def test_hardware_commands() -> None:
    listing = specmd("hardware", "list")
    assert listing.returncode == 0
    for pid in ("a100-80g-sxm", "h100-pcie", "h100-sxm", "h200", "gh200", "rtx4090", "l4",
                "slow-link-5gbps", "hgx-h100-8gpu"):  # fmt: skip
        assert pid in listing.stdout
    (hgx,) = [line for line in listing.stdout.splitlines() if "hgx-h100-8gpu" in line]
    assert " 8 " in hgx and "56.0 GB/s" in hgx  # 8 GPUs, the NVMe array
    shown = specmd("hardware", "show", "gh200", "--json")
    assert json.loads(shown.stdout)["id"] == "gh200"
    # the host's instruction-set level, a fact and not a number, is shown with its source
    (isa,) = [ln for ln in specmd("hardware", "show", "xeon6454s-rtx4090").stdout.splitlines()
              if "nodes.host.isa" in ln]  # fmt: skip
    assert "amx" in isa and "Sapphire Rapids" in isa
    (core,) = [ln for ln in specmd("hardware", "show", "xeon6454s-rtx4090").stdout.splitlines()
               if "nodes.host.core" in ln]  # fmt: skip
    assert "golden-cove" in core  # and its core, which the host rule reads
    (xeon,) = [ln for ln in listing.stdout.splitlines() if "xeon6454s-rtx4090" in ln]
    assert "4.76 (golden-cove)" in xeon  # its single-thread speed in Zen 2 GHz
    ok = specmd("hardware", "validate", "hardware_profiles/h100-pcie.yaml",
                cwd=Path(__file__).resolve().parents[2])  # fmt: skip
    assert ok.returncode == 0 and "valid profile 'h100-pcie'" in ok.stdout
    assert "note:" not in ok.stdout  # (its id is its file's name)


def test_hardware_validate_notes_an_id_that_is_not_the_files_name(tmp_path: Path) -> None:
    """A profile whose id is not its file's name is valid (a what-if copy may keep the
    original's id), and ``hardware validate`` says so, since runs name the machine by its id."""
    root = Path(__file__).resolve().parents[2]
    copy = tmp_path / "my-box.yaml"
    copy.write_text((root / "hardware_profiles" / "h100-pcie.yaml").read_text())
    proc = specmd("hardware", "validate", str(copy))
    assert proc.returncode == 0, proc.stderr
    valid, note = proc.stdout.splitlines()
    assert f"{copy}: valid profile 'h100-pcie' (" in valid
    assert note.startswith("note: its id 'h100-pcie' is not its file's name 'my-box': ")
    assert "(id: my-box)" in note


def test_models_show_json() -> None:
    proc = specmd("models", "show", "olmoe-1b-7b", "--json")
    data = json.loads(proc.stdout)
    assert data["expert_bytes"] == 12 * 1024**2 and data["routed_bytes"] == 12 * 1024**3


def test_policies_list_json() -> None:
    rows = json.loads(specmd("policies", "list", "--json").stdout)
    assert {(r["family"], r["kind"]) for r in rows} >= {("eviction", "least-stale"),
                                                        ("prefetch", "top-k")}  # fmt: skip
    offline = {r["kind"] for r in rows if r["offline"]}
    assert {"belady", "oracle", "noisy-oracle"} <= offline and "lru" not in offline
    assert "belady (offline)" in specmd("policies", "list").stdout


@pytest.mark.parametrize("preset", ["olmoe", "mixtral"])
def test_bundled_traces_are_reproduced_by_the_documented_command(
    preset: str, tmp_path: Path
) -> None:
    out = tmp_path / f"{preset}.npz"
    proc = specmd("trace", "generate", "--preset", preset, "--seed", "0", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert out.read_bytes() == bundled_trace_path(f"{preset}-synthetic").read_bytes()


def test_trace_info_json() -> None:
    info = json.loads(specmd("trace", "info", "olmoe-synthetic", "--json").stdout)
    assert info["model"] == "olmoe-1b-7b" and info["tokens"] == 256 and info["pred_lookahead"] == 1


def test_trace_generate_checks_out_before_generating(tmp_path: Path, monkeypatch, capsys) -> None:
    from support.cli import cli

    import specmd_sim.traces as traces

    def generated(*args: object) -> None:
        raise AssertionError("the trace was generated before --out was checked")

    monkeypatch.setattr(traces, "generate_trace", generated)
    code, out, err = cli(monkeypatch, capsys, "trace", "generate", "--out", str(tmp_path))
    assert (code, out) == (2, "") and err.startswith("error: --out: expected a file")


def test_module_entry(tmp_path: Path) -> None:
    """``python -m specmd_sim`` is the command: a run's metrics, and a user error's one line."""

    def start(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "specmd_sim", *args], capture_output=True,
                              text=True, timeout=300)  # fmt: skip

    ok = start("replay", *SMALL, "--json", "--out", str(tmp_path / "run"))
    assert ok.returncode == 0 and json.loads(ok.stdout)["accesses"] > 0, ok.stderr
    bad = start("replay", *SMALL, "--out", str(tmp_path / "run" / "result.json" / "x"))
    assert bad.returncode == 2 and bad.stderr.startswith("error: --out") and bad.stdout == ""
    assert bad.stderr.count("\n") == 1


def test_the_run_folder_being_written_is_said_on_a_terminal_only(monkeypatch) -> None:
    """While the run folder is written (seconds for a long run), a terminal shows a transient
    line saying so; elsewhere (a pipe, a log) nothing is written."""
    import io
    import time

    from specmd_sim.cli import run as run_cli

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    for name in ("TTY_INTERACTIVE", "TTY_COMPATIBLE", "NO_COLOR", "FORCE_COLOR"):
        monkeypatch.delenv(name, raising=False)  # (rich's own switches: as on a terminal)
    monkeypatch.setenv("TERM", "xterm")
    for terminal, said in ((Terminal(), True), (io.StringIO(), False)):
        monkeypatch.setattr(sys, "stderr", terminal)
        with run_cli._status("writing the run folder runs/x"):
            time.sleep(0.05)  # (drawn as it starts, and again a few times a second)
        assert ("writing the run folder runs/x" in terminal.getvalue()) is said

"""A catalogue of bad inputs: each is refused with exit code 2 and one line naming the input.

Every case runs ``specmd ...`` (or an API call) in a fork of this process (:mod:`forked`): a
hang fails its case at a deadline, a runaway allocation fails it at a memory cap, and a case
cannot disturb the next. A case passes when the answer is exit code 2 and one line ``error:
<input>: <field>: expected ..., got ...`` that names its fragments, with no traceback, no other
line mentioning an error, and nothing written over: a command that would write into an earlier
complete run folder (``{prev}``) or over another file must leave it byte for byte as it was, and
a config that names a plug-in by import path must not import it (its module would write
``ran.txt``).

Inputs come from the bundled data (the h100-pcie profile, the fused-kernels runtime, the
Mixtral model) with one thing broken each, so a case fails for its own reason only.
"""

from __future__ import annotations

import copy
import io
import json
import re
import shutil
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from hardening.forked import (
    Outcome,
    api,
    api_error_problems,
    cli,
    describe,
    restore,
    snapshot,
    user_error_problems,
)

# imported here once, so that each fork starts with them loaded (a fork then takes milliseconds)
import specmd_sim.cli
import specmd_sim.engine.replay
import specmd_sim.engine.sim
import specmd_sim.regress
import specmd_sim.report
import specmd_sim.scenario
import specmd_sim.sweep  # noqa: F401
from specmd_sim.hardware import load_profile
from specmd_sim.models import load_model
from specmd_sim.policies import EVICTION, MISS, PREDICTORS, PREFETCH
from specmd_sim.runtime.loader import load_runtime

for _registry in (EVICTION, PREFETCH, PREDICTORS, MISS):
    _registry.kinds()  # load the bundled plug-ins before forking

SMALL = ("--trace", "mixtral-synthetic", "--set", "workload.max_requests=1", "--cache", "16")
PROFILE = load_profile("h100-pcie").model_dump(mode="json")
RUNTIME = load_runtime("fused-kernels").model_dump(mode="json")
MODEL = load_model("mixtral-8x7b").model_dump(mode="json")
HF_MIXTRAL = {
    "architectures": ["MixtralForCausalLM"], "hidden_act": "silu", "hidden_size": 4096,
    "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mixtral",
    "num_attention_heads": 32, "num_experts_per_tok": 2, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "num_local_experts": 8, "rope_theta": 1000000.0,
    "sliding_window": None, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "vocab_size": 32000,
}  # fmt: skip
TRACE_META = {"format": "specmd-trace", "version": 1, "model": "mixtral-8x7b", "num_layers": 32,
              "num_experts": 8, "top_k": 2}  # fmt: skip
BASELINE = {
    "format": "specmd-baseline", "version": 1,
    "metrics": {"hit_rate": {"better": "higher", "rel": 0.0, "abs": 0.01}},
    "points": {"run": {"values": {"hit_rate": 0.5}}},
}  # fmt: skip

# nine levels of nine: 9**9 = 387,420,489 values once expanded, in 10 lines
ALIAS_BOMB = "".join(
    f"{a}: &{a} [{', '.join([f'*{p}'] * 9) if p else ', '.join(['1'] * 9)}]\n"
    for p, a in zip(["", *"abcdefgh"], "abcdefghi", strict=True)
)
ALIAS_BOMB_FLOW = ALIAS_BOMB.replace("\n", ", ").rstrip(", ")  # the same, as one flow mapping
RECURSIVE = "&loop [*loop]"
DEEP = "[" * 1_500 + "]" * 1_500  # nesting beyond the recursion limit (1000 frames)
LONG_DEEP = "[" * 20_000 + "]" * 20_000  # the same, 40 kB long
NOT_UTF8 = "name: caf\xe9\n".encode("latin-1")
EVIL_MODULE = "hardening_evil"
EVIL = "import pathlib\npathlib.Path(__file__).with_name('ran.txt').write_text('ran')\n"


def bomb(line: str) -> str:
    """The alias bomb and ``line``, which puts its last level (``*i``) into a real field."""
    return ALIAS_BOMB + line + "\n"


def dump(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False)


def mutated(base: dict[str, Any], change: Callable[[dict[str, Any]], Any]) -> dict[str, Any]:
    data = copy.deepcopy(base)
    change(data)
    return data


# --- a case ----------------------------------------------------------------------------------

Files = dict[str, str | bytes]


@dataclass(frozen=True)
class Case:
    """``specmd ARGS``; ``{tmp}`` (this case's folder), ``{prev}`` (an earlier complete run
    folder, which must survive), ``{spans}`` (one with spans), ``{replay}`` and ``{sweep}``
    are filled in."""

    args: tuple[str, ...]
    fragments: tuple[str, ...] = ()
    files: Files = field(default_factory=dict)
    setup: Callable[[Path, World], None] | None = None
    cwd: str | None = None
    keep: tuple[str, ...] = ()  # files or folders that must not change
    plugin: bool = False  # {tmp} is importable and holds the module EVIL_MODULE


def case(case_id: str, *args: str, fragments: tuple[str, ...] = (), **kw: Any) -> Any:
    return pytest.param(Case(tuple(args), tuple(fragments), **kw), id=case_id)


@dataclass
class World:
    """What the cases share, made once: an earlier complete timing run without spans
    (``prev``, small, so that checking it after every case is cheap), one with spans, a
    replay run and a sweep folder; and their bytes, to check and restore them after a case."""

    prev: Path
    spans: Path
    replay: Path
    sweep: Path
    saved: dict[str, dict[str, bytes | None]] = field(default_factory=dict)

    def names(self) -> dict[str, str]:
        return {"prev": str(self.prev), "spans": str(self.spans), "replay": str(self.replay),
                "sweep": str(self.sweep)}  # fmt: skip


def _write_sweep(root: Path) -> None:
    from specmd_sim import SimConfig
    from specmd_sim.sweep.store import ResultStore, table_columns

    rows = [{"point_index": i, "point_id": f"replay-{i}", "status": "ok", "error": None,
             "axis.capacity": cap, "engine": "replay", "hit_rate": 0.5}
            for i, cap in enumerate(["8", "16"])]  # fmt: skip
    axes = {"capacity": [row["axis.capacity"] for row in rows]}
    store = ResultStore(root, table_columns("replay", axes, [SimConfig()]), len(rows))
    store.scan()
    for row in rows:
        store.append(row)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    root = tmp_path_factory.mktemp("world")
    w = World(root / "prev", root / "spans", root / "replay", root / "sweep")
    no_spans = ("--set", "timing.record_spans=false")
    for command, out, extra in (("run", w.prev, no_spans), ("run", w.spans, ()),
                                ("replay", w.replay, ())):  # fmt: skip
        made = cli(command, *SMALL, *extra, "--out", out, deadline=60)
        assert made.code == 0, describe(made)
    made = api(lambda: _write_sweep(w.sweep), deadline=60)
    assert made.payload and made.payload[0] == "returned", describe(made)
    for name, path in w.names().items():
        w.saved[name] = snapshot(Path(path))
    return w


_SLOT = re.compile(r"\{(tmp|prev|spans|replay|sweep)\}")


def fill(text: str, names: dict[str, str]) -> str:
    return _SLOT.sub(lambda m: names[m[1]], text)


# --- helpers that write inputs ---------------------------------------------------------------


def npz_bytes(members: dict[str, Any], *, compress: bool = True, pickle: bool = False) -> bytes:
    """A zip of ``.npy`` members; ``meta`` as a JSON string unless given as an array."""
    buffer = io.BytesIO()
    method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with zipfile.ZipFile(buffer, "w", method) as zf:
        for name, value in members.items():
            if name == "meta" and not isinstance(value, np.ndarray):
                value = np.array(value if isinstance(value, str) else json.dumps(value))
            with zf.open(f"{name}.npy", "w") as fh:
                np.lib.format.write_array(fh, np.asanyarray(value), allow_pickle=pickle)
    return buffer.getvalue()


def trace_members(tokens: int = 4) -> dict[str, Any]:
    """A valid 4-token Mixtral-shaped trace: experts 0 and 1 everywhere, one decode request."""
    experts = np.zeros((tokens, 32, 2), np.int16)
    experts[:, :, 1] = 1
    return {"meta": dict(TRACE_META), "experts": experts, "request": np.zeros(tokens, np.int32),
            "phase": np.ones(tokens, np.uint8)}  # fmt: skip


def trace_with(**changes: Any) -> bytes:
    members = trace_members()
    for name, value in changes.items():
        if value is None:
            members.pop(name)
        else:
            members[name] = value
    return npz_bytes(members)


def meta_with(**changes: Any) -> dict[str, Any]:
    return {**TRACE_META, **changes}


def experts_with(fill_value: int | None = None, at: tuple[int, int, int] | None = None,
                 value: int = 0, dtype: Any = np.int16) -> np.ndarray:  # fmt: skip
    experts = trace_members()["experts"].astype(dtype)
    if fill_value is not None:
        experts[...] = fill_value
    if at is not None:
        experts[at] = value
    return experts


def huge_header_npz(compress: bool) -> bytes:
    """A trace whose experts header claims 10**12 tokens over a few bytes of data."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<i2", "fortran_order": False, "shape": (10**12, 32, 2)}
    )
    members = {k: v for k, v in trace_members().items() if k != "experts"}
    buffer = io.BytesIO(npz_bytes(members, compress=compress))
    method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with zipfile.ZipFile(buffer, "a", method) as zf:
        zf.writestr("experts.npy", header.getvalue() + b"\x00" * 64)
    return buffer.getvalue()


def copy_run(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    return target


def reseal(folder: Path) -> None:
    """Rewrite the manifest so that it agrees with the files (as if written that way)."""
    path = folder / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["files"] = {name: (folder / name).stat().st_size for name in manifest["files"]
                         if (folder / name).is_file()}  # fmt: skip
    path.write_text(json.dumps(manifest, sort_keys=True, indent=2) + "\n")


def edited_run(change: Callable[[Path], None], *, source: str = "prev", seal: bool = True
               ) -> Callable[[Path, World], None]:  # fmt: skip
    """A setup: ``{tmp}/run`` is a copy of a world run folder, changed, its manifest resealed
    (someone else's folder: consistent, but wrong inside) unless ``seal`` is false."""

    def setup(tmp: Path, w: World) -> None:
        run = copy_run(getattr(w, source), tmp / "run")
        change(run)
        if seal:
            reseal(run)

    return setup


def result_edit(change: Callable[[dict[str, Any]], Any]) -> Callable[[Path], None]:
    def edit(run: Path) -> None:
        data = json.loads((run / "result.json").read_text())
        change(data)
        (run / "result.json").write_text(json.dumps(data))

    return edit


def write_result(text: str | bytes) -> Callable[[Path], None]:
    def edit(run: Path) -> None:
        path = run / "result.json"
        path.write_bytes(text if isinstance(text, bytes) else text.encode())

    return edit


def manifest_edit(change: Callable[[dict[str, Any]], Any]) -> Callable[[Path], None]:
    def edit(run: Path) -> None:
        path = run / "manifest.json"
        data = json.loads(path.read_text())
        change(data)
        path.write_text(json.dumps(data))

    return edit


def plugin_result(run: Path) -> None:
    """Someone else's result: its config names a plug-in by import path."""
    data = json.loads((run / "result.json").read_text())
    data["config"]["eviction"] = {"kind": f"{EVIL_MODULE}:Policy"}
    (run / "result.json").write_text(json.dumps(data))
    config = yaml.safe_load((run / "config.yaml").read_text())
    config["eviction"] = {"kind": f"{EVIL_MODULE}:Policy"}
    (run / "config.yaml").write_text(yaml.safe_dump(config))


def sweep_copy(corrupt: Callable[[Path], None]) -> Callable[[Path, World], None]:
    def setup(tmp: Path, w: World) -> None:
        folder = copy_run(w.sweep, tmp / "sweep")
        corrupt(sorted(folder.glob("*.parquet"))[0])

    return setup


def garbage_part(part: Path) -> None:
    part.write_bytes(b"PAR1 this is not a parquet file at all " * 8)


def truncated_part(part: Path) -> None:
    part.write_bytes(part.read_bytes()[: part.stat().st_size // 2])


def made_file(name: str, text: str = "mine") -> Callable[[Path, World], None]:
    def setup(tmp: Path, w: World) -> None:
        path = tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    return setup


def made_dir(name: str) -> Callable[[Path, World], None]:
    def setup(tmp: Path, w: World) -> None:
        (tmp / name).mkdir(parents=True)

    return setup


def quiet_profile(change: Callable[[dict[str, Any]], Any]) -> str:
    return dump(mutated(PROFILE, change))


def gpu(d: dict[str, Any]) -> dict[str, Any]:
    return d["nodes"][0]


# --- the catalogue ---------------------------------------------------------------------------

RUN_PREV = ("--out", "{prev}")
CFG = "{tmp}/c.yaml"
HW = "{tmp}/hw.yaml"
RT = "{tmp}/rt.yaml"
MODEL_FILE = "{tmp}/m.yaml"
HF = "{tmp}/config.json"
TRACE = "{tmp}/t.npz"
SPEC = "{tmp}/spec.yaml"
SPEC_BASE = {"engine": "replay", "base": {"trace": "mixtral-synthetic",
             "workload": {"max_requests": 1}, "cache": {"capacity": 16}}}  # fmt: skip


def config_case(case_id: str, text: str | bytes, *fragments: str, command: str = "replay",
                extra: tuple[str, ...] = (), named: bool = True) -> Any:  # fmt: skip
    """``named``: the error names the file (false for checks made when the run is built,
    against the hardware and the trace, which name the field and the other input)."""
    return case(case_id, command, "--config", CFG, *extra, *RUN_PREV,
                fragments=(CFG, *fragments) if named else fragments,
                files={"c.yaml": text})  # fmt: skip


def set_case(case_id: str, *assignments: str, fragments: tuple[str, ...], command: str = "replay",
             **kw: Any) -> Any:  # fmt: skip
    sets = [part for a in assignments for part in ("--set", a)]
    return case(case_id, command, *SMALL, *sets, *RUN_PREV, fragments=fragments, **kw)


def hw_case(case_id: str, text: str | bytes, *fragments: str, command: str = "run",
            named: bool = True) -> Any:  # fmt: skip
    if command == "validate":
        args: tuple[str, ...] = ("hardware", "validate", HW)
    else:
        args = (command, *SMALL, "--hardware", HW, *RUN_PREV)
    return case(case_id, *args, fragments=(HW, *fragments) if named else fragments,
                files={"hw.yaml": text})  # fmt: skip


def rt_case(case_id: str, text: str | bytes, *fragments: str) -> Any:
    return case(case_id, "run", *SMALL, "--runtime", RT, *RUN_PREV, fragments=(RT, *fragments),
                files={"rt.yaml": text})  # fmt: skip


def model_case(case_id: str, text: str | bytes, *fragments: str) -> Any:
    return case(case_id, "replay", *SMALL, "--model", MODEL_FILE, *RUN_PREV,
                fragments=(MODEL_FILE, *fragments), files={"m.yaml": text})  # fmt: skip


def hf_case(case_id: str, text: str | bytes, *fragments: str, command: str = "replay") -> Any:
    if command == "import":
        args: tuple[str, ...] = ("models", "import", HF)
    else:
        args = ("replay", *SMALL, "--model", HF, *RUN_PREV)
    return case(case_id, *args, fragments=(HF, *fragments), files={"config.json": text})


def trace_case(case_id: str, data: bytes, *fragments: str, command: str = "replay") -> Any:
    if command == "info":
        args: tuple[str, ...] = ("trace", "info", TRACE)
    else:
        args = ("replay", "--trace", TRACE, "--cache", "16", *RUN_PREV)
    return case(case_id, *args, fragments=(TRACE, *fragments), files={"t.npz": data})


def spec_case(case_id: str, text: str | bytes, *fragments: str, extra: tuple[str, ...] = (),
              **kw: Any) -> Any:  # fmt: skip
    return case(case_id, "sweep", SPEC, "--out", "{tmp}/out", *extra,
                fragments=(SPEC, *fragments), files={"spec.yaml": text}, **kw)  # fmt: skip


def spec(**changes: Any) -> str:
    data = copy.deepcopy(SPEC_BASE)
    data.update(changes)
    return dump(data)


CASES = [
    # --- config files (--config) -------------------------------------------------------------
    config_case("config-malformed-unclosed-quote", "trace: 'mixtral-synthetic\n", "YAML"),
    config_case("config-top-level-list", "- trace\n- seed\n", "mapping"),
    config_case("config-top-level-scalar", "42\n", "mapping"),
    config_case("config-unknown-key", "cachee: {capacity: 16}\n", "cachee"),
    config_case("config-unknown-nested-key", "workload: {max_request: 1}\n", "max_request"),
    config_case("config-section-is-scalar", "workload: 5\n", "workload"),
    config_case(
        "config-cache-null-with-cache-flag", "cache: null\n", "cache", extra=("--cache", "16")
    ),
    config_case(
        "config-cache-scalar-with-cache-flag", "cache: 16\n", "cache", extra=("--cache", "16")
    ),
    config_case(
        "config-cache-list-with-cache-flag", "cache: [16]\n", "cache", extra=("--cache", "16")
    ),
    config_case("config-cache-null", "cache: null\n", "cache"),
    config_case("config-alias-bomb", bomb("workload: {requests: *i}"), "alias"),
    config_case(
        "config-alias-bomb-in-plugin-params", bomb("eviction: {kind: lru, x: *i}"), "alias"
    ),
    config_case("config-recursive-alias", f"workload: {{requests: {RECURSIVE}}}\n"),
    config_case("config-deep-nesting", f"workload: {DEEP}\n"),
    config_case("config-not-utf8", NOT_UTF8, "UTF-8"),
    config_case("config-python-object-tag", "seed: !!python/object/apply:os.getpid []\n"),
    config_case("config-unhashable-key", "? [a, b]\n: 1\n"),
    config_case("config-seed-bool", "seed: true\n", "seed"),
    config_case("config-seed-negative", "seed: -1\n", "seed"),
    config_case("config-seed-float", "seed: 1.5\n", "seed"),
    config_case("config-seed-inf", "seed: 1.0e+400\n", "seed"),
    config_case("config-seed-nan", "seed: .nan\n", "seed"),
    config_case("config-max-requests-zero", "workload: {max_requests: 0}\n", "max_requests"),
    config_case("config-batch-size-bool", "workload: {batch_size: true}\n", "batch_size"),
    config_case(
        "config-arrival-rate-inf",
        "workload: {arrivals: poisson, arrival_rate_per_s: .inf}\n",
        "arrival_rate_per_s",
    ),
    config_case(
        "config-arrival-rate-nan",
        "workload: {arrivals: poisson, arrival_rate_per_s: .nan}\n",
        "arrival_rate_per_s",
    ),
    config_case("config-hot-fraction-nan", "precision: {hot_fraction: .nan}\n", "hot_fraction"),
    config_case(
        "config-chunk-bytes-4096",
        "trace: mixtral-synthetic\n"
        "workload: {max_requests: 1}\ncache: {capacity: 16}\ntiming: {chunk_bytes: 4096}\n",
        "chunk_bytes",
        command="run",
    ),
    config_case(
        "config-chunk-bytes-zero", "timing: {chunk_bytes: 0}\n", "chunk_bytes", command="run"
    ),
    config_case("config-gpus-zero", "parallel: {gpus: 0}\n", "gpus"),
    config_case("config-gpus-bool", "parallel: {gpus: true}\n", "gpus"),
    config_case(
        "config-gpus-huge", "parallel: {gpus: 1000000000}\n", "gpus", command="run", named=False
    ),
    config_case("config-capacity-negative", "cache: {capacity: -3}\n", "capacity"),
    config_case("config-capacity-nan", "cache: {capacity: .nan}\n", "capacity"),
    config_case("config-dram-capacity-float", "memory: {dram_capacity: 0.5}\n", "dram_capacity"),
    config_case(
        "config-nvme-unknown-node",
        "trace: mixtral-synthetic\nmemory: {nvme: nvme9}\n",
        "nvme",
        command="run",
        named=False,
    ),
    config_case("config-expert-dtype-unknown", "expert_dtype: int7x\n", "expert_dtype"),
    config_case("config-eviction-list", "eviction: [lru]\n", "eviction"),
    config_case("config-eviction-null", "eviction: null\n", "eviction"),
    config_case("config-eviction-unknown-param", "eviction: {kind: lru, foo: 1}\n", "foo"),
    config_case(
        "config-predictor-accuracy-above-one",
        "predictor: {kind: noisy-oracle, accuracy: 2}\n",
        "accuracy",
    ),
    config_case("config-trace-is-number", "trace: 5\n", "trace"),
    config_case(
        "config-requests-unknown-id",
        "trace: mixtral-synthetic\nworkload: {requests: [999]}\n",
        "requests",
        named=False,
    ),
    case(
        "config-plugin-import-path",
        "replay",
        "--config",
        CFG,
        *SMALL,
        *RUN_PREV,
        fragments=(CFG, "eviction.kind"),
        plugin=True,
        files={"c.yaml": f"eviction: {{kind: '{EVIL_MODULE}:Policy'}}\n"},
    ),
    case(
        "config-missing-file",
        "replay",
        "--config",
        "{tmp}/none.yaml",
        *RUN_PREV,
        fragments=("{tmp}/none.yaml",),
    ),
    case("config-is-a-folder", "replay", "--config", "{tmp}", *RUN_PREV, fragments=("{tmp}",)),
    # --- --set overrides and flags -----------------------------------------------------------
    set_case("set-seed-true", "seed=true", fragments=("seed",)),
    set_case("set-seed-nan", "seed=.nan", fragments=("seed",)),
    set_case("set-seed-inf", "seed=.inf", fragments=("seed",)),
    set_case("set-seed-1e400", "seed=1e400", fragments=("seed",)),
    set_case("set-max-requests-bool", "workload.max_requests=true", fragments=("max_requests",)),
    set_case("set-max-requests-negative", "workload.max_requests=-1", fragments=("max_requests",)),
    set_case("set-batch-size-float", "workload.batch_size=1.5", fragments=("batch_size",)),
    set_case("set-batch-size-zero", "workload.batch_size=0", fragments=("batch_size",)),
    set_case(
        "set-prefill-chunk-negative",
        "workload.prefill_chunk_tokens=-1",
        fragments=("prefill_chunk_tokens",),
    ),
    set_case("set-hot-fraction-above-one", "precision.hot_fraction=2", fragments=("hot_fraction",)),
    # serving: SLO limits, the continuous scheduler, the KV cache
    set_case("set-slo-negative", "slo.ttft_s=-1", fragments=("slo.ttft_s",), command="run"),
    set_case("set-slo-empty", "slo={}", fragments=("slo", "ttft_s", "tpot_s"), command="run"),
    set_case("set-slo-nan", "slo.tpot_s=.nan", fragments=("slo.tpot_s",), command="run"),
    set_case(
        "set-max-tokens-with-slots",
        "workload.max_tokens_per_step=8",
        fragments=("max_tokens_per_step", "scheduler: slots"),
    ),
    set_case(
        "set-max-tokens-zero",
        "workload.scheduler=continuous",
        "workload.max_tokens_per_step=0",
        fragments=("max_tokens_per_step",),
    ),
    set_case("set-kv-wait-with-slots", "workload.kv_cache=wait", fragments=("kv_cache", "wait")),
    set_case(
        "set-kv-wait-auto",
        "workload.scheduler=continuous",
        "workload.kv_cache=wait",
        "cache.capacity=auto",
        fragments=("cache.capacity", "auto"),
    ),
    set_case("set-kv-paged-with-slots", "workload.kv_cache=paged", fragments=("kv_cache", "paged")),
    set_case(
        "set-kv-paged-auto",
        "workload.scheduler=continuous",
        "workload.kv_cache=paged",
        "cache.capacity=auto",
        fragments=("cache.capacity", "auto", "paged"),
    ),
    set_case(
        "set-kv-block-zero",
        "workload.scheduler=continuous",
        "workload.kv_cache=paged",
        "workload.kv_block_tokens=0",
        fragments=("kv_block_tokens",),
    ),
    set_case(
        "set-schedule-unknown",
        "workload.schedule=lazy",
        fragments=("workload.schedule",),
    ),
    set_case("set-router-unknown", "parallel.router=random", fragments=("parallel.router",)),
    set_case(
        "set-router-least-loaded-fixed",
        "hardware=hgx-h100-8gpu",
        "parallel.gpus=2",
        "parallel.router=least-loaded",
        "workload.arrivals=poisson",
        "workload.arrival_rate_per_s=5",
        "workload.schedule=fixed",
        fragments=("parallel.router", "workload.schedule: online"),
        command="run",
    ),
    set_case("set-kv-mode-unknown", "workload.kv_cache=spill", fragments=("kv_cache",)),
    set_case("set-kv-dtype-unknown", "kv_dtype=int3", fragments=("kv_dtype",)),
    set_case("set-scheduler-unknown", "workload.scheduler=fifo", fragments=("scheduler",)),
    set_case("set-record-spans-not-bool", "timing.record_spans=maybe", fragments=("record_spans",)),
    set_case("set-unknown-top-level", "nope=1", fragments=("nope",)),
    set_case("set-empty-key", "=5", fragments=("--set",)),
    set_case("set-into-a-number", "seed.x=1", fragments=("seed",)),
    set_case(
        "set-chunk-bytes-4096", "timing.chunk_bytes=4096", fragments=("chunk_bytes",), command="run"
    ),
    set_case("set-capacity-inf", "cache.capacity=.inf", fragments=("cache.capacity",)),
    set_case(
        "set-capacity-huge-slots", "cache.capacity=1000000000000", fragments=("cache.capacity",)
    ),
    set_case("set-gpus-huge", "parallel.gpus=1000000000", fragments=("gpus",), command="run"),
    set_case(
        "set-alias-bomb-value",
        f"workload.requests={{{ALIAS_BOMB_FLOW}}}",
        fragments=("workload.requests",),
    ),
    set_case(
        "set-recursive-value", f"workload.requests={RECURSIVE}", fragments=("workload.requests",)
    ),
    set_case("set-deep-value", f"workload.requests={DEEP}", fragments=("workload.requests",)),
    set_case(
        "set-deep-value-40kb", f"workload.requests={LONG_DEEP}", fragments=("workload.requests",)
    ),
    set_case(
        "set-plugin-import-path",
        f"eviction.kind={EVIL_MODULE}:Policy",
        fragments=("eviction.kind",),
        plugin=True,
    ),
    set_case("set-newline-in-trace-name", "trace=bad\nname", fragments=("trace",)),
    case("flag-seed-negative", "replay", *SMALL, "--seed", "-1", *RUN_PREV, fragments=("seed",)),
    case(
        "flag-seed-not-a-number",
        "replay",
        *SMALL,
        "--seed",
        "abc",
        *RUN_PREV,
        fragments=("--seed",),
    ),
    case(
        "flag-cache-nan",
        "replay",
        *SMALL,
        "--cache",
        "nan",
        *RUN_PREV,
        fragments=("cache.capacity",),
    ),
    case(
        "flag-cache-zero-slots",
        "replay",
        *SMALL,
        "--cache",
        "0",
        *RUN_PREV,
        fragments=("cache.capacity",),
    ),
    case(
        "flag-cache-negative-bytes",
        "replay",
        *SMALL,
        "--cache=-1GiB",
        *RUN_PREV,
        fragments=("cache.capacity",),
    ),
    case(
        "flag-cache-inf-bytes",
        "replay",
        *SMALL,
        "--cache",
        "infGiB",
        *RUN_PREV,
        fragments=("cache.capacity",),
    ),
    case(
        "flag-eviction-import-path",
        "replay",
        *SMALL,
        "--eviction",
        f"{EVIL_MODULE}:Policy",
        *RUN_PREV,
        fragments=("eviction.kind",),
        plugin=True,
    ),
    case(
        "flag-runtime-unknown",
        "run",
        *SMALL,
        "--runtime",
        "nope",
        *RUN_PREV,
        fragments=("runtime",),
    ),
    case(
        "flag-hardware-newline-in-path",
        "run",
        *SMALL,
        "--hardware",
        "{tmp}/a\nb.yaml",
        *RUN_PREV,
        fragments=("hardware",),
    ),
    case("flag-trace-is-a-folder", "replay", "--trace", "{tmp}", *RUN_PREV, fragments=("trace",)),
    # --- hardware profiles -------------------------------------------------------------------
    hw_case(
        "hw-copy-engines-huge",
        quiet_profile(lambda d: gpu(d)["copy_engines_h2d"].update(value=1_000_000_000)),
        "copy_engines_h2d",
    ),
    hw_case(
        "hw-copy-engines-float",
        quiet_profile(lambda d: gpu(d)["copy_engines_h2d"].update(value=2.5)),
        "copy_engines_h2d",
        command="validate",
    ),
    hw_case(
        "hw-copy-engines-bool",
        quiet_profile(lambda d: gpu(d)["copy_engines_h2d"].update(value=True)),
        "copy_engines_h2d",
        command="validate",
    ),
    hw_case(
        "hw-copy-engines-zero",
        quiet_profile(lambda d: gpu(d)["copy_engines_d2h"].update(value=0)),
        "copy_engines_d2h",
    ),
    hw_case(
        "hw-hbm-inf",
        quiet_profile(lambda d: gpu(d)["hbm_bytes"].update(value=float("inf"))),
        "hbm_bytes",
    ),
    hw_case(
        "hw-hbm-nan",
        quiet_profile(lambda d: gpu(d)["hbm_bytes"].update(value=float("nan"))),
        "hbm_bytes",
        command="validate",
    ),
    hw_case(
        "hw-hbm-string",
        quiet_profile(lambda d: gpu(d)["hbm_bytes"].update(value="80GB")),
        "hbm_bytes",
        command="validate",
    ),
    hw_case(
        "hw-link-bandwidth-zero",
        quiet_profile(lambda d: d["links"][0]["bandwidth_bytes_per_s"].update(value=0)),
        "bandwidth_bytes_per_s",
    ),
    hw_case(
        "hw-link-bandwidth-1e400",
        quiet_profile(lambda d: d["links"][0]["bandwidth_bytes_per_s"].update(value=float("inf"))),
        "bandwidth_bytes_per_s",
        command="validate",
    ),
    hw_case(
        "hw-link-latency-negative",
        quiet_profile(lambda d: d["links"][0]["latency_s"].update(value=-1e-6)),
        "latency_s",
    ),
    hw_case(
        "hw-efficiency-above-one",
        quiet_profile(lambda d: gpu(d)["compute_efficiency"].update(value=1.5)),
        "compute_efficiency",
    ),
    hw_case(
        "hw-grade-unknown",
        quiet_profile(lambda d: gpu(d)["hbm_bytes"].update(grade="Z")),
        "grade",
        command="validate",
    ),
    hw_case(
        "hw-source-empty",
        quiet_profile(lambda d: gpu(d)["hbm_bytes"].update(source="")),
        "source",
        command="validate",
    ),
    hw_case(
        "hw-schema-version-2",
        quiet_profile(lambda d: d.update(schema_version=2)),
        "schema_version",
        command="validate",
    ),
    hw_case(
        "hw-unknown-key", quiet_profile(lambda d: gpu(d).update(hbm=1)), "hbm", command="validate"
    ),
    hw_case(
        "hw-node-kind-unknown",
        quiet_profile(lambda d: gpu(d).update(kind="tpu")),
        "kind",
        command="validate",
    ),
    hw_case(
        "hw-link-to-unknown-node", quiet_profile(lambda d: d["links"][0].update(b="gpu9")), "gpu9"
    ),
    hw_case("hw-link-self-loop", quiet_profile(lambda d: d["links"][0].update(a="gpu0")), "links"),
    hw_case(
        "hw-duplicate-node-ids",
        quiet_profile(lambda d: d["nodes"][1].update(id="gpu0")),
        "nodes",
        command="validate",
    ),
    hw_case(
        "hw-no-gpu",
        quiet_profile(
            lambda d: d.update(
                nodes=[n for n in d["nodes"] if n["kind"] != "gpu"],
                links=[link for link in d["links"] if "gpu0" not in (link["a"], link["b"])],
            )
        ),
        "gpu",
    ),
    hw_case(
        "hw-gpu-not-connected",
        quiet_profile(
            lambda d: d.update(links=[link for link in d["links"] if link["id"] != "pcie0"])
        ),
        "gpu0",
        named=False,
    ),
    hw_case(
        "hw-nodes-not-a-list",
        quiet_profile(lambda d: d.update(nodes={"gpu0": 1})),
        "nodes",
        command="validate",
    ),
    hw_case("hw-top-level-list", "- 1\n- 2\n", "mapping", command="validate"),
    hw_case("hw-empty-file", "", "mapping"),
    hw_case("hw-alias-bomb", bomb("description: *i"), "alias"),
    hw_case("hw-recursive-alias", f"nodes: {RECURSIVE}\n", command="validate"),
    hw_case("hw-deep-nesting", f"nodes: {DEEP}\n", command="validate"),
    hw_case("hw-not-utf8", NOT_UTF8, "UTF-8", command="validate"),
    hw_case(
        "hw-duplicate-link-ids",
        quiet_profile(lambda d: d["links"][1].update(id="pcie0")),
        "links",
        command="validate",
    ),
    hw_case(
        "hw-no-host",
        quiet_profile(
            lambda d: d.update(
                nodes=[n for n in d["nodes"] if n["kind"] != "host"],
                links=[{**d["links"][0], "a": "nvme0"}],
            )
        ),
        "host",
        command="validate",
    ),
    case(
        "hw-missing-file",
        "run",
        *SMALL,
        "--hardware",
        "{tmp}/none.yaml",
        *RUN_PREV,
        fragments=("{tmp}/none.yaml",),
    ),
    case(
        "hw-show-folder-named-yaml",
        "hardware",
        "show",
        "{tmp}/d.yaml",
        fragments=("{tmp}/d.yaml",),
        setup=made_dir("d.yaml"),
    ),
    # --- runtime profiles --------------------------------------------------------------------
    rt_case("rt-unknown-key", dump({**RUNTIME, "turbo": True}), "turbo"),
    rt_case(
        "rt-negative-overhead",
        dump(mutated(RUNTIME, lambda d: d["token_overhead_s"].update(value=-1.0))),
        "token_overhead_s",
    ),
    rt_case(
        "rt-kernels-bool",
        dump(mutated(RUNTIME, lambda d: d["kernels"]["attention"].update(value=True))),
        "attention",
    ),
    rt_case(
        "rt-efficiency-nan",
        dump(mutated(RUNTIME, lambda d: d["h2d_efficiency"].update(value=float("nan")))),
        "h2d_efficiency",
    ),
    rt_case("rt-alias-bomb", bomb("description: *i"), "alias"),
    rt_case("rt-not-utf8", NOT_UTF8, "UTF-8"),
    # --- model files (--model x.yaml, config.json) -------------------------------------------
    model_case("model-yaml-alias-bomb", bomb("source: *i")),
    model_case(
        "model-yaml-recursive",
        dump({**MODEL, "name": None}).replace("name: null", f"name: {RECURSIVE}"),
    ),
    model_case("model-yaml-deep-nesting", f"source: {DEEP}\n"),
    model_case("model-yaml-not-utf8", NOT_UTF8),
    model_case("model-yaml-top-level-list", "- 1\n"),
    model_case(
        "model-yaml-missing-field",
        dump({k: v for k, v in MODEL.items() if k != "num_experts"}),
        "num_experts",
    ),
    model_case("model-yaml-experts-negative", dump({**MODEL, "num_experts": -8}), "num_experts"),
    model_case("model-yaml-experts-bool", dump({**MODEL, "top_k": True}), "top_k"),
    model_case("model-yaml-top-k-above-experts", dump({**MODEL, "top_k": 9}), "top_k"),
    model_case(
        "model-yaml-hidden-size-huge", dump({**MODEL, "hidden_size": 10**30}), "hidden_size"
    ),
    hf_case("hf-json-truncated", json.dumps(HF_MIXTRAL)[:40], "JSON"),
    hf_case("hf-json-nan", json.dumps({**HF_MIXTRAL, "hidden_size": float("nan")}), "hidden_size"),
    hf_case(
        "hf-json-1e400",
        json.dumps(HF_MIXTRAL).replace('"hidden_size": 4096', '"hidden_size": 1e400'),
        "hidden_size",
    ),
    hf_case(
        "hf-json-experts-bool",
        json.dumps({**HF_MIXTRAL, "num_local_experts": True}),
        "num_local_experts",
        command="import",
    ),
    hf_case("hf-json-deep-nesting", '{"model_type": ' + DEEP + "}", command="import"),
    hf_case("hf-json-not-utf8", b'{"model_type": "mixtral\xff"}', command="import"),
    hf_case(
        "hf-json-experts-huge",
        json.dumps({**HF_MIXTRAL, "num_local_experts": 10**12}),
        "num_local_experts",
    ),
    # --- traces (.npz) -----------------------------------------------------------------------
    trace_case("trace-not-a-zip", b"this is not a zip file" * 10),
    trace_case("trace-empty-file", b""),
    trace_case("trace-truncated", trace_with()[:300]),
    trace_case("trace-npy-named-npz", b"\x93NUMPY" + b"\x00" * 100),
    trace_case(
        "trace-pickled-experts",
        npz_bytes(
            {**trace_members(), "experts": np.array([[[0, 1]]] * 4, dtype=object)}, pickle=True
        ),
        "experts",
    ),
    trace_case(
        "trace-pickled-meta",
        npz_bytes({**trace_members(), "meta": np.array([TRACE_META], dtype=object)}, pickle=True),
        "meta",
    ),
    trace_case(
        "trace-experts-float", trace_with(experts=experts_with(dtype=np.float32)), "experts"
    ),
    trace_case("trace-experts-bool", trace_with(experts=experts_with(dtype=bool)), "experts"),
    trace_case("trace-experts-2d", trace_with(experts=np.zeros((4, 64), np.int16)), "experts"),
    trace_case(
        "trace-experts-zero-tokens",
        trace_with(
            experts=np.zeros((0, 32, 2), np.int16),
            request=np.zeros(0, np.int32),
            phase=np.zeros(0, np.uint8),
        ),
        "experts",
    ),
    trace_case(
        "trace-expert-id-below-minus-one",
        trace_with(experts=experts_with(at=(2, 3, 1), value=-2)),
        "experts",
        "-2",
    ),
    trace_case(
        "trace-expert-id-int64-huge",
        trace_with(experts=experts_with(at=(0, 0, 0), value=2**40, dtype=np.int64)),
        "experts",
    ),
    trace_case("trace-all-minus-one", trace_with(experts=experts_with(fill_value=-1)), "experts"),
    trace_case(
        "trace-duplicate-experts",
        trace_with(experts=experts_with(at=(1, 1, 1), value=0)),
        "experts",
    ),
    trace_case("trace-meta-missing", trace_with(meta=None), "meta"),
    trace_case("trace-meta-not-json", trace_with(meta="{not json"), "meta"),
    trace_case("trace-meta-a-list", trace_with(meta="[1, 2]"), "meta"),
    trace_case(
        "trace-meta-num-experts-bool", trace_with(meta=meta_with(num_experts=True)), "num_experts"
    ),
    trace_case("trace-meta-model-unknown", trace_with(meta=meta_with(model="gpt-9")), "model"),
    trace_case(
        "trace-meta-format-wrong",
        trace_with(meta=meta_with(format="other")),
        "format",
        command="info",
    ),
    trace_case("trace-request-missing", trace_with(request=None), "request"),
    trace_case("trace-request-negative", trace_with(request=np.full(4, -1, np.int32)), "request"),
    trace_case(
        "trace-phase-two", trace_with(phase=np.full(4, 2, np.uint8)), "phase", command="info"
    ),
    trace_case(
        "trace-phase-prefill-after-decode",
        trace_with(phase=np.array([1, 1, 0, 1], np.uint8)),
        "phase",
    ),
    trace_case(
        "trace-gates-wrong-shape", trace_with(gates=np.ones((4, 32, 3), np.float32)), "gates"
    ),
    trace_case("trace-arrival-inf", trace_with(arrival_s=np.full(4, np.inf)), "arrival_s"),
    trace_case(
        "trace-pred-scores-wrong-shape",
        trace_with(pred_scores=np.zeros((1, 4, 32, 9), np.float16)),
        "pred_scores",
    ),
    trace_case("trace-header-claims-huge-shape-stored", huge_header_npz(compress=False)),
    trace_case("trace-header-claims-huge-shape-deflated", huge_header_npz(compress=True)),
    trace_case("trace-info-truncated", trace_with()[:300], command="info"),
    case(
        "trace-info-lookahead-huge",
        "trace",
        "info",
        "mixtral-synthetic",
        "--predictor",
        "transition",
        "--lookahead",
        "1000000000",
        fragments=("lookahead",),
    ),
    case(
        "trace-generate-seed-negative",
        "trace",
        "generate",
        "--out",
        "{tmp}/keep.npz",
        "--seed",
        "-1",
        fragments=("seed",),
        setup=made_file("keep.npz"),
        keep=("{tmp}/keep.npz",),
    ),
    case(
        "trace-generate-unknown-knob",
        "trace",
        "generate",
        "--out",
        "{tmp}/keep.npz",
        "--set",
        "repeat=0.3",
        fragments=("repeat",),
        setup=made_file("keep.npz"),
        keep=("{tmp}/keep.npz",),
    ),
    case(
        "trace-generate-prob-above-one",
        "trace",
        "generate",
        "--out",
        "{tmp}/keep.npz",
        "--set",
        "repeat_prob=2",
        fragments=("repeat_prob",),
        setup=made_file("keep.npz"),
        keep=("{tmp}/keep.npz",),
    ),
    case(
        "trace-generate-huge-counts",
        "trace",
        "generate",
        "--out",
        "{tmp}/keep.npz",
        "--set",
        "num_requests=1000000000",
        fragments=("num_requests",),
        setup=made_file("keep.npz"),
        keep=("{tmp}/keep.npz",),
    ),
    case(
        "trace-import-garbage",
        "trace",
        "import",
        "{tmp}/garbage.jsonl",
        "--format",
        "vllm",
        "--model",
        "mixtral-8x7b",
        "--out",
        "{tmp}/keep.npz",
        fragments=("{tmp}/garbage.jsonl",),
        keep=("{tmp}/keep.npz",),
        files={"garbage.jsonl": b"\x00\xff{]", "keep.npz": "mine"},
    ),
    # --- sweep specs -------------------------------------------------------------------------
    spec_case("sweep-alias-bomb", bomb("base: {workload: {requests: *i}}"), "alias"),
    spec_case("sweep-alias-bomb-in-axes", bomb("engine: replay\naxes: {seed: *i}"), "alias"),
    spec_case("sweep-recursive-alias", f"engine: replay\naxes: {{seed: {RECURSIVE}}}\n"),
    spec_case("sweep-deep-nesting", f"base: {DEEP}\n"),
    spec_case("sweep-not-utf8", NOT_UTF8, "UTF-8"),
    spec_case("sweep-top-level-list", "- 1\n", "mapping"),
    spec_case("sweep-unknown-key", spec(axis={"seed": [1]}), "axis"),
    spec_case("sweep-engine-unknown", spec(engine="warp"), "engine"),
    spec_case("sweep-axis-not-a-list", spec(axes={"eviction": "lru"}), "eviction"),
    spec_case("sweep-axis-empty", spec(axes={"eviction": []}), "eviction"),
    spec_case("sweep-zip-unequal", spec(zip=[{"capacity": [8, 16], "seed": [1]}]), "zip"),
    spec_case("sweep-axis-bad-kind", spec(axes={"eviction": ["lru", "nope"]}), "eviction"),
    spec_case("sweep-axis-seed-bool", spec(axes={"seed": [True, False]}), "seed"),
    spec_case("sweep-base-unknown-key", spec(base={"cachee": 1}), "cachee"),
    spec_case("sweep-set-without-equals", spec(set=["noequals"]), "noequals"),
    spec_case("sweep-duplicate-points", spec(axes={"seed": [1, 1]}), "point"),
    spec_case(
        "sweep-grid-huge",
        spec(
            axes={
                "predictor.accuracy": [i / 1000 for i in range(1000)],
                "seed": list(range(1000)),
                "cache.capacity": list(range(1, 1001)),
            }
        ),
        "axes",
    ),
    spec_case(
        "sweep-plugin-in-axes",
        spec(axes={"eviction": [f"{EVIL_MODULE}:Policy"]}),
        "eviction.kind",
        plugin=True,
    ),
    spec_case(
        "sweep-plugin-in-base",
        spec(base={"eviction": {"kind": f"{EVIL_MODULE}:Policy"}}),
        "eviction.kind",
        plugin=True,
    ),
    spec_case(
        "sweep-plugin-in-set",
        spec(set=[f"prefetch.kind={EVIL_MODULE}:Policy"]),
        "prefetch.kind",
        plugin=True,
    ),
    case(
        "sweep-spec-missing",
        "sweep",
        "{tmp}/none.yaml",
        "--out",
        "{tmp}/out",
        fragments=("{tmp}/none.yaml",),
    ),
    case(
        "sweep-out-is-a-file",
        "sweep",
        SPEC,
        "--out",
        "{tmp}/f",
        fragments=("--out",),
        files={"spec.yaml": spec(), "f": "mine"},
        keep=("{tmp}/f",),
    ),
    case(
        "sweep-out-inside-a-file",
        "sweep",
        SPEC,
        "--out",
        "{tmp}/f/sub",
        fragments=("--out",),
        files={"spec.yaml": spec(), "f": "mine"},
        keep=("{tmp}/f",),
    ),
    case(
        "sweep-out-folder-of-other-files",
        "sweep",
        SPEC,
        "--out",
        "{tmp}/mine",
        fragments=("--out",),
        files={"spec.yaml": spec(), "mine/thesis.tex": "years"},
        keep=("{tmp}/mine",),
    ),
    case(
        "sweep-out-unwritable",
        "sweep",
        SPEC,
        "--out",
        "/proc/sys/specmd-sweep",
        fragments=("--out",),
        files={"spec.yaml": spec()},
    ),
    case(
        "sweep-out-cwd",
        "sweep",
        SPEC,
        "--out",
        ".",
        fragments=("--out",),
        cwd="{tmp}/here",
        files={"spec.yaml": spec(), "here/thesis.tex": "years"},
        keep=("{tmp}/here",),
    ),
    case(
        "sweep-workers-zero",
        "sweep",
        SPEC,
        "--out",
        "{tmp}/out",
        "--workers",
        "0",
        fragments=("--workers",),
        files={"spec.yaml": spec()},
    ),
    case(
        "sweep-executor-unknown",
        "sweep",
        SPEC,
        "--out",
        "{tmp}/out",
        "--executor",
        "slurm",
        fragments=("--executor",),
        files={"spec.yaml": spec()},
    ),
    case(
        "sweep-csv-is-a-folder",
        "sweep",
        SPEC,
        "--out",
        "{tmp}/out",
        "--csv",
        "{tmp}/d",
        fragments=("--csv",),
        files={"spec.yaml": spec(), "d/keep.txt": "mine"},
        keep=("{tmp}/d",),
    ),
    # --- result folders: report, timeline, compare, regress ----------------------------------
    case(
        "report-result-is-a-list",
        "report",
        "{tmp}/run",
        fragments=("result.json",),
        setup=edited_run(write_result("[]")),
    ),
    case(
        "report-result-without-engine",
        "report",
        "{tmp}/run",
        fragments=("engine",),
        setup=edited_run(result_edit(lambda d: d.pop("engine"))),
    ),
    case(
        "report-result-unparsable",
        "report",
        "{tmp}/run",
        fragments=("result.json",),
        setup=edited_run(write_result('{"engine": ')),
    ),
    case(
        "report-result-not-utf8",
        "report",
        "{tmp}/run",
        fragments=("result.json",),
        setup=edited_run(write_result(b'{"engine": "caf\xe9"}')),
    ),
    case(
        "report-result-deep-nesting",
        "report",
        "{tmp}/run",
        fragments=("result.json",),
        setup=edited_run(write_result(DEEP)),
    ),
    case(
        "report-result-metrics-a-list",
        "report",
        "{tmp}/run",
        fragments=("metrics",),
        setup=edited_run(result_edit(lambda d: d.update(metrics=[]))),
    ),
    case(
        "report-result-per-pass-a-string",
        "report",
        "{tmp}/run",
        fragments=("per_pass",),
        setup=edited_run(result_edit(lambda d: d.update(per_pass="x"))),
    ),
    case(
        "report-listed-file-missing",
        "report",
        "{tmp}/run",
        fragments=("spans.npz",),
        setup=edited_run(lambda run: (run / "spans.npz").unlink(), source="spans", seal=False),
    ),
    case(
        "report-extra-file",
        "report",
        "{tmp}/run",
        fragments=("extra.bin",),
        setup=edited_run(lambda run: (run / "extra.bin").write_bytes(b"\x00" * 10)),
    ),
    case(
        "report-manifest-size-disagrees",
        "report",
        "{tmp}/run",
        fragments=("result.json",),
        setup=edited_run(
            manifest_edit(lambda d: d["files"].update({"result.json": 1})), seal=False
        ),
    ),
    case(
        "report-manifest-unparsable",
        "report",
        "{tmp}/run",
        fragments=("manifest.json",),
        setup=edited_run(lambda run: (run / "manifest.json").write_text("{"), seal=False),
    ),
    case(
        "report-manifest-a-list",
        "report",
        "{tmp}/run",
        fragments=("manifest.json",),
        setup=edited_run(lambda run: (run / "manifest.json").write_text("[]"), seal=False),
    ),
    case(
        "report-manifest-names-a-path-outside",
        "report",
        "{tmp}/run",
        fragments=("manifest.json",),
        setup=edited_run(
            manifest_edit(lambda d: d["files"].update({"../outside.txt": 4})), seal=False
        ),
        files={"outside.txt": "four"},
    ),
    case(
        "report-manifest-missing",
        "report",
        "{tmp}/run",
        fragments=("{tmp}/run",),
        setup=edited_run(lambda run: (run / "manifest.json").unlink(), seal=False),
    ),
    case(
        "report-spans-not-a-zip",
        "report",
        "{tmp}/run",
        fragments=("spans.npz",),
        setup=edited_run(
            lambda run: (run / "spans.npz").write_bytes(b"garbage" * 20), source="spans"
        ),
    ),
    case(
        "report-spans-pickled",
        "report",
        "{tmp}/run",
        fragments=("spans.npz",),
        setup=edited_run(
            lambda run: (run / "spans.npz").write_bytes(
                npz_bytes(
                    {"meta": {"format": "specmd-spans"}, "spans": np.array([{}], dtype=object)},
                    pickle=True,
                )
            ),
            source="spans",
        ),
    ),
    case("report-run-folder-missing", "report", "{tmp}/none", fragments=("{tmp}/none",)),
    case(
        "report-run-folder-is-a-file",
        "report",
        "{tmp}/f",
        fragments=("{tmp}/f",),
        files={"f": "mine"},
        keep=("{tmp}/f",),
    ),
    case(
        "report-out-is-a-folder",
        "report",
        "{prev}",
        "--out",
        "{tmp}/d",
        fragments=("--out",),
        files={"d/keep.txt": "mine"},
        keep=("{tmp}/d",),
    ),
    case(
        "report-out-inside-a-file",
        "report",
        "{prev}",
        "--out",
        "{tmp}/f/r.html",
        fragments=("--out",),
        files={"f": "mine"},
        keep=("{tmp}/f",),
    ),
    case(
        "report-out-unwritable",
        "report",
        "{prev}",
        "--out",
        "/proc/sys/specmd-report.html",
        fragments=("--out",),
    ),
    case(
        "report-image-format-unknown",
        "report",
        "{prev}",
        "--out",
        "{tmp}/r.html",
        "--image",
        "gif",
        fragments=("--image",),
    ),
    case(
        "timeline-window-reversed",
        "timeline",
        "{spans}",
        "--out",
        "{tmp}/t.html",
        "--window",
        "20:10",
        fragments=("--window",),
    ),
    case(
        "timeline-max-spans-too-small",
        "timeline",
        "{spans}",
        "--out",
        "{tmp}/t.html",
        "--max-spans",
        "5",
        fragments=("--max-spans",),
    ),
    case(
        "timeline-of-a-replay-run",
        "timeline",
        "{replay}",
        "--out",
        "{tmp}/t.html",
        fragments=("{replay}",),
    ),
    case(
        "timeline-out-is-a-folder",
        "timeline",
        "{spans}",
        "--out",
        "{tmp}/d",
        fragments=("--out",),
        files={"d/keep.txt": "mine"},
        keep=("{tmp}/d",),
    ),
    case(
        "compare-result-is-a-list",
        "compare",
        "{tmp}/run",
        "--out",
        "{tmp}/c.html",
        fragments=("result.json",),
        setup=edited_run(write_result("[]")),
    ),
    case(
        "compare-result-without-metrics",
        "compare",
        "{tmp}/run",
        "--out",
        "{tmp}/c.html",
        fragments=("metrics",),
        setup=edited_run(result_edit(lambda d: d.pop("metrics"))),
    ),
    case(
        "compare-sweep-corrupt-part",
        "compare",
        "{tmp}/sweep",
        "--out",
        "{tmp}/c.html",
        fragments=("{tmp}/sweep",),
        setup=sweep_copy(garbage_part),
    ),
    case(
        "compare-path-missing",
        "compare",
        "{prev}",
        "{tmp}/none",
        "--out",
        "{tmp}/c.html",
        fragments=("{tmp}/none",),
    ),
    case(
        "compare-out-is-a-folder",
        "compare",
        "{prev}",
        "--out",
        "{tmp}/d",
        fragments=("--out",),
        files={"d/keep.txt": "mine"},
        keep=("{tmp}/d",),
    ),
    case(
        "compare-out-inside-a-file",
        "compare",
        "{prev}",
        "--out",
        "{tmp}/f/c.html",
        fragments=("--out",),
        files={"f": "mine"},
        keep=("{tmp}/f",),
    ),
    case(
        "regress-run-result-is-a-list",
        "regress",
        "{tmp}/b.json",
        "--run",
        "{tmp}/run",
        fragments=("result.json",),
        setup=edited_run(write_result("[]")),
        files={"b.json": json.dumps(BASELINE)},
    ),
    case(
        "regress-run-result-without-engine",
        "regress",
        "{tmp}/b.json",
        "--run",
        "{tmp}/run",
        fragments=("engine",),
        setup=edited_run(result_edit(lambda d: d.pop("engine"))),
        files={"b.json": json.dumps(BASELINE)},
    ),
    case(
        "regress-run-result-metrics-a-list",
        "regress",
        "{tmp}/b.json",
        "--run",
        "{tmp}/run",
        fragments=("metrics",),
        setup=edited_run(result_edit(lambda d: d.update(metrics=[1]))),
        files={"b.json": json.dumps(BASELINE)},
    ),
    case(
        "regress-run-result-unparsable",
        "regress",
        "{tmp}/b.json",
        "--run",
        "{tmp}/run",
        fragments=("result.json",),
        setup=edited_run(write_result("{")),
        files={"b.json": json.dumps(BASELINE)},
    ),
    case(
        "regress-run-manifest-disagrees",
        "regress",
        "{tmp}/b.json",
        "--run",
        "{tmp}/run",
        fragments=("result.json",),
        setup=edited_run(write_result("{}"), seal=False),
        files={"b.json": json.dumps(BASELINE)},
    ),
    case(
        "regress-run-plugin-import-path-in-result",
        "regress",
        "{tmp}/b.json",
        "--run",
        "{tmp}/run",
        fragments=("eviction.kind",),
        plugin=True,
        setup=edited_run(plugin_result),
        files={"b.json": json.dumps(BASELINE)},
    ),
    case(
        "regress-sweep-corrupt-part",
        "regress",
        "{tmp}/b.json",
        "--sweep",
        "{tmp}/sweep",
        fragments=(".parquet",),
        setup=sweep_copy(garbage_part),
        files={"b.json": json.dumps(BASELINE)},
    ),
    case(
        "regress-sweep-truncated-part",
        "regress",
        "{tmp}/b.json",
        "--sweep",
        "{tmp}/sweep",
        fragments=(".parquet",),
        setup=sweep_copy(truncated_part),
        files={"b.json": json.dumps(BASELINE)},
    ),
    case(
        "regress-baseline-unparsable",
        "regress",
        "{tmp}/b.json",
        "--run",
        "{prev}",
        fragments=("{tmp}/b.json",),
        files={"b.json": "{"},
    ),
    case(
        "regress-baseline-a-list",
        "regress",
        "{tmp}/b.json",
        "--run",
        "{prev}",
        fragments=("{tmp}/b.json",),
        files={"b.json": "[]"},
    ),
    case(
        "regress-baseline-deep-nesting",
        "regress",
        "{tmp}/b.json",
        "--run",
        "{prev}",
        fragments=("{tmp}/b.json",),
        files={"b.json": DEEP},
    ),
    case(
        "regress-baseline-tolerance-negative",
        "regress",
        "{tmp}/b.json",
        "--run",
        "{prev}",
        fragments=("rel",),
        files={
            "b.json": json.dumps(
                mutated(BASELINE, lambda d: d["metrics"]["hit_rate"].update(rel=-1))
            )
        },
    ),
    case(
        "regress-baseline-tolerance-nan",
        "regress",
        "{tmp}/b.json",
        "--run",
        "{prev}",
        fragments=("abs",),
        files={
            "b.json": json.dumps(
                mutated(BASELINE, lambda d: d["metrics"]["hit_rate"].update(abs=float("nan")))
            )
        },
    ),
    case(
        "regress-baseline-better-unknown",
        "regress",
        "{tmp}/b.json",
        "--run",
        "{prev}",
        fragments=("better",),
        files={
            "b.json": json.dumps(
                mutated(BASELINE, lambda d: d["metrics"]["hit_rate"].update(better="sideways"))
            )
        },
    ),
    case(
        "regress-baseline-value-a-string",
        "regress",
        "{tmp}/b.json",
        "--run",
        "{prev}",
        fragments=("hit_rate",),
        files={
            "b.json": json.dumps(
                mutated(BASELINE, lambda d: d["points"]["run"]["values"].update(hit_rate="high"))
            )
        },
    ),
    case(
        "regress-update-metric-unknown",
        "regress",
        "{tmp}/b.json",
        "--run",
        "{prev}",
        "--update",
        "--metric",
        "nope_s",
        fragments=("nope_s",),
        files={"b.json": json.dumps(BASELINE)},
        keep=("{tmp}/b.json",),
    ),
    case(
        "regress-update-baseline-is-a-folder",
        "regress",
        "{tmp}/d",
        "--run",
        "{prev}",
        "--update",
        fragments=("{tmp}/d",),
        files={"d/keep.txt": "mine"},
        keep=("{tmp}/d",),
    ),
    # --- output paths of run, replay, trace generate, models import ---------------------------
    case(
        "out-is-a-file",
        "replay",
        *SMALL,
        "--out",
        "{tmp}/f",
        fragments=("--out",),
        files={"f": "mine"},
        keep=("{tmp}/f",),
    ),
    case(
        "out-inside-a-file",
        "run",
        *SMALL,
        "--out",
        "{tmp}/f/run",
        fragments=("--out",),
        files={"f": "mine"},
        keep=("{tmp}/f",),
    ),
    case(
        "out-unwritable-folder",
        "replay",
        *SMALL,
        "--out",
        "/proc/sys/specmd-run",
        fragments=("--out",),
    ),
    case(
        "out-cwd",
        "replay",
        *SMALL,
        "--out",
        ".",
        fragments=("--out",),
        cwd="{tmp}/here",
        files={"here/thesis.tex": "years"},
        keep=("{tmp}/here",),
    ),
    case(
        "out-parent-of-cwd",
        "replay",
        *SMALL,
        "--out",
        "..",
        fragments=("--out",),
        cwd="{tmp}/here",
        files={"here/x": "1", "thesis.tex": "years"},
        keep=("{tmp}",),
    ),
    case(
        "out-empty-string",
        "replay",
        *SMALL,
        "--out",
        "",
        fragments=("--out",),
        cwd="{tmp}/here",
        files={"here/thesis.tex": "years"},
        keep=("{tmp}/here",),
    ),
    case(
        "out-folder-of-other-files",
        "run",
        *SMALL,
        "--out",
        "{tmp}/mine",
        fragments=("--out",),
        files={"mine/thesis.tex": "years"},
        keep=("{tmp}/mine",),
    ),
    case(
        "trace-generate-out-is-a-folder",
        "trace",
        "generate",
        "--out",
        "{tmp}/d",
        fragments=("{tmp}/d",),
        files={"d/keep.txt": "mine"},
        keep=("{tmp}/d",),
    ),
    case(
        "trace-generate-out-inside-a-file",
        "trace",
        "generate",
        "--out",
        "{tmp}/f/t.npz",
        fragments=("{tmp}/f",),
        files={"f": "mine"},
        keep=("{tmp}/f",),
    ),
    case(
        "trace-generate-out-unwritable",
        "trace",
        "generate",
        "--out",
        "/proc/sys/t.npz",
        fragments=("/proc/sys/t.npz",),
    ),
    case(
        "models-import-out-is-a-folder",
        "models",
        "import",
        HF,
        "--out",
        "{tmp}/d",
        fragments=("{tmp}/d",),
        files={"config.json": json.dumps(HF_MIXTRAL), "d/keep.txt": "mine"},
        keep=("{tmp}/d",),
    ),
]

# --- writes that fail after the pre-check: a parent that cannot hold the output ---------------
WRITE_CASES: list[Any] = [
    # every writing command with its output (OUT) below a regular file of the earlier run folder,
    # which stays as it was, and under /proc, where permissions say yes to root and the write no
    *(
        case(
            f"write-{name}-{where}",
            *(f"{parent}/out" if arg == "OUT" else arg for arg in args),
            fragments=(option, f"{parent}/out"),
            files={
                "spec.yaml": spec(),
                "config.json": json.dumps(HF_MIXTRAL),
                "r.json": json.dumps([[[0, 1]] * 32]),
            },
            keep=("{prev}",),
        )
        for where, parent in (("below-a-file", "{prev}/result.json"), ("under-proc", "/proc/x"))
        for name, option, args in (
            ("run", "--out", ("run", *SMALL, "--out", "OUT")),
            ("replay", "--out", ("replay", *SMALL, "--out", "OUT")),
            ("sweep", "--out", ("sweep", SPEC, "--out", "OUT")),
            ("sweep-csv", "--csv", ("sweep", SPEC, "--out", "{tmp}/out", "--csv", "OUT")),
            ("report", "--out", ("report", "{prev}", "--out", "OUT")),
            ("timeline", "--out", ("timeline", "{spans}", "--out", "OUT")),
            ("compare", "--out", ("compare", "{prev}", "--out", "OUT")),
            ("mrc", "--out", ("mrc", *SMALL[:4], "--capacities", "8,16", "--out", "OUT")),
            ("trace-generate", "--out", ("trace", "generate", "--out", "OUT")),
            (
                "trace-import",
                "--out",
                (
                    "trace",
                    "import",
                    "{tmp}/r.json",
                    "--format",
                    "vllm",
                    "--model",
                    "mixtral-8x7b",
                    "--out",
                    "OUT",
                ),
            ),
            (
                "trace-record",
                "--out",
                ("trace", "record", "--model", HF, "--random-weights", "--out", "OUT"),
            ),
            ("models-import", "--out", ("models", "import", HF, "--out", "OUT")),
            ("regress-update", "baseline", ("regress", "OUT", "--run", "{prev}", "--update")),
            ("reproduce", "--out", ("reproduce", "specmd", "--quick", "--out", "OUT")),
            ("validate-published", "--out", ("validate", "published", "--out", "OUT")),
            # (cuda needs a GPU and torch: the output is refused before either is needed)
            ("validate-real", "--out", ("validate", "real", "--backend", "cuda", "--out", "OUT")),
            ("calibrate", "--folder", ("calibrate", "--backend", "cuda", "--folder", "OUT")),
        )
    ),
    # an output that is something else already: a folder, a file, a binary document
    case(
        "write-trace-record-model-file-is-a-folder",
        "trace",
        "record",
        "--model",
        HF,
        "--random-weights",
        "--out",
        "{tmp}/t.npz",
        fragments=("--out", "{tmp}/t.model.yaml"),
        files={"config.json": json.dumps(HF_MIXTRAL), "t.model.yaml/keep.txt": "mine"},
        keep=("{tmp}/t.model.yaml", "{prev}"),
    ),
    case(
        "write-validate-published-out-is-a-folder",
        "validate",
        "published",
        "--out",
        "{tmp}/d",
        fragments=("--out", "{tmp}/d"),
        files={"d/keep.txt": "mine"},
        keep=("{tmp}/d", "{prev}"),
    ),
    case(
        "write-validate-published-out-binary",
        "validate",
        "published",
        "--out",
        "{tmp}/v.md",
        fragments=("--out", "{tmp}/v.md"),
        files={"v.md": NOT_UTF8},
        keep=("{tmp}/v.md", "{prev}"),
    ),
    case(
        "write-validate-real-out-binary",
        "validate",
        "real",
        "--backend",
        "cuda",
        "--out",
        "{tmp}/v.md",
        fragments=("--out", "{tmp}/v.md"),
        files={"v.md": NOT_UTF8},
        keep=("{tmp}/v.md", "{prev}"),
    ),
    case(
        "write-calibrate-folder-is-a-file",
        "calibrate",
        "--backend",
        "cuda",
        "--folder",
        "{tmp}/f",
        fragments=("--folder", "{tmp}/f"),
        files={"f": "mine"},
        keep=("{tmp}/f", "{prev}"),
    ),
    case(
        "write-reproduce-out-is-a-file",
        "reproduce",
        "specmd",
        "--quick",
        "--out",
        "{tmp}/f",
        fragments=("--out", "{tmp}/f"),
        files={"f": "mine"},
        keep=("{tmp}/f", "{prev}"),
    ),
    # a cut-off cell file: --rewrite reads it before it writes
    case(
        "write-validate-real-rewrite-truncated",
        "validate",
        "real",
        "--rewrite",
        "--folder",
        "{tmp}/cal",
        "--out",
        "{tmp}/v.md",
        fragments=("{tmp}/cal/real-validation.json",),
        files={
            "cal/real-validation.json": '[{"bandwidth": 2000000000.0, "mode": "dec',
            "v.md": "# mine\n",
        },
        keep=("{tmp}/cal", "{tmp}/v.md", "{prev}"),
    ),
]


# --- imports that declare absurd sizes: refused before they allocate --------------------------
def npy_claiming(shape: tuple[int, ...], descr: str = "<i8") -> bytes:
    """A ``.npy`` file whose header claims ``shape`` over 64 bytes of data."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": descr, "fortran_order": False, "shape": shape}
    )
    return header.getvalue() + b"\x00" * 64


def zip_bomb(members: dict[str, Any], name: str, shape: tuple[int, ...], descr: str) -> bytes:
    """An ``.npz`` of ``members`` and a member ``name`` of zeros shaped ``shape``: a real deflate
    stream of about 1 kB per MiB that it decompresses to (its CRC is not checked until the end)."""
    import zlib  # only here: the deflate stream is built by hand

    header = npy_claiming(shape, descr)[:-64]
    chunk, data = 1 << 20, int(np.prod(shape)) * np.dtype(descr).itemsize
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
    parts = [deflate.compress(header) + deflate.flush(zlib.Z_SYNC_FLUSH)]
    for _ in range(2):  # the first chunk after the header, then one that repeats as it is
        parts.append(deflate.compress(bytes(chunk)) + deflate.flush(zlib.Z_SYNC_FLUSH))
    stream = b"".join(parts) + parts[-1] * (data // chunk - 2) + deflate.flush()
    buffer = io.BytesIO(npz_bytes(members))
    with zipfile.ZipFile(buffer, "a") as zf:
        info = zipfile.ZipInfo(f"{name}.npy")
        with zf.open(info, "w", force_zip64=True) as fh:  # stored: the stream as it is
            fh.write(stream)
        info.compress_type, info.file_size = zipfile.ZIP_DEFLATED, len(header) + data
    return buffer.getvalue()


def big_file(name: str, size: int) -> Callable[[Path, World], None]:
    def setup(tmp: Path, w: World) -> None:
        with open(tmp / name, "wb") as fh:
            fh.truncate(size)  # sparse: no disk

    return setup


def import_case(case_id: str, name: str, data: str | bytes, *fragments: str, fmt: str = "long",
                model: str = "mixtral-8x7b", extra: tuple[str, ...] = (),
                named: bool = True) -> Any:  # fmt: skip
    """``trace import {tmp}/NAME`` into the earlier run folder ``{prev}``, which must survive;
    ``named``: the error names the file (false for an option, which names itself)."""
    src = f"{{tmp}}/{name}"
    return case(case_id, "trace", "import", src, "--format", fmt, "--model", model, *extra,
                "--out", "{prev}/imported.npz", fragments=(src, *fragments) if named else fragments,
                files={name: data})  # fmt: skip


LONG_HEADER = "request,token,layer,rank,expert\n"
LONG_OK = LONG_HEADER + "r,0,0,0,1\nr,0,0,1,2\n"
SPEC_LINE = '{"problem_id": 1, "layer": %d, "experts": [0, 1]}\n'
QWEN3 = {**HF_MIXTRAL, "model_type": "qwen3_moe", "moe_intermediate_size": 768}

IMPORT_CASES: list[Any] = [
    import_case(
        "import-vllm-npy-header-claims-1e9-tokens",
        "t.npy",
        npy_claiming((10**9, 32, 8)),
        "shape",
        "64 bytes",
        fmt="vllm",
    ),
    import_case(
        "import-vllm-npz-header-claims-1e12-tokens",
        "t.npz",
        huge_header_npz(compress=True),
        "experts",
        fmt="vllm",
    ),
    import_case(
        "import-vllm-npz-stored-header-claims-1e12-tokens",
        "t.npz",
        huge_header_npz(compress=False),
        "experts",
        fmt="vllm",
    ),
    import_case(
        "import-vllm-npz-zip-bomb-8-gib",
        "t.npz",
        zip_bomb({}, "routed_experts", (1 << 24, 32, 2), "<i8"),
        "routed_experts",
        "times the archive's",
        fmt="vllm",
    ),
    trace_case(
        "trace-zip-bomb-8-gib",
        zip_bomb(
            {k: v for k, v in trace_members().items() if k != "experts"},
            "experts",
            (1 << 26, 32, 2),
            "<i2",
        ),
        "experts",
        "times the archive's",
    ),
    import_case(
        "import-long-rank-1e9", "t.csv", LONG_HEADER + "r,0,0,1000000000,1\n", "rank", "1000000000"
    ),
    import_case(
        "import-long-rank-1e9-unknown-model",
        "t.csv",
        LONG_HEADER + "r,0,0,1000000000,1\n",
        "rank",
        model="my-model",
    ),
    import_case(
        "import-long-layer-1e9",
        "t.csv",
        LONG_HEADER + "r,0,1000000000,0,1\n",
        "layer",
        "1000000000",
    ),
    import_case(
        "import-long-layer-1e12-unknown-model",
        "t.csv",
        LONG_HEADER + "r,0,0,0,1\nr,0,1000000000000,0,2\n",
        "layer",
        model="my-model",
    ),
    import_case(
        "import-long-layer-1e12-only-logged",
        "t.csv",
        LONG_HEADER + "r,0,0,0,1\nr,0,1000000000000,0,2\n",
        "layer",
        model="my-model",
        extra=("--only-logged-layers",),
    ),
    import_case("import-long-layer-1e30", "t.csv", LONG_HEADER + "r,0,1e30,0,1\n", "layer"),
    import_case(
        "import-top-k-1e8",
        "t.csv",
        LONG_OK,
        "--top-k",
        "100000000",
        extra=("--top-k", "100000000"),
        named=False,
    ),
    import_case(
        "import-top-k-1e8-unknown-model",
        "t.csv",
        LONG_OK,
        "--top-k",
        model="my-model",
        extra=("--top-k", "100000000"),
        named=False,
    ),
    import_case(
        "import-num-layers-1e9",
        "t.csv",
        LONG_OK,
        "--num-layers",
        "1000000000",
        extra=("--num-layers", "1000000000"),
        named=False,
    ),
    import_case(
        "import-num-layers-1e9-sglang",
        "t.jsonl",
        '{"routed_experts": ""}\n',
        "--num-layers",
        fmt="sglang",
        extra=("--num-layers", "1000000000"),
        named=False,
    ),
    import_case(
        "import-long-padding-beyond-the-rows",
        "t.csv",
        LONG_HEADER + "".join(f"r,{t},0,0,1\n" for t in range(100)) + "r,0,0,7,2\n",
        "tokens x layers x top_k",
        extra=("--num-layers", "131072"),
    ),
    import_case(
        "import-speculative-moe-layer-1e9",
        "t.jsonl",
        SPEC_LINE % 0 + SPEC_LINE % 10**9,
        "layer",
        fmt="speculative-moe",
        model="my-model",
    ),
    import_case(
        "import-speculative-moe-padding-beyond-the-records",
        "t.jsonl",
        SPEC_LINE % 0 * 100 + SPEC_LINE % 131071,
        "tokens x layers x top_k",
        fmt="speculative-moe",
        extra=("--num-layers", "131072"),
    ),
    hf_case(
        "hf-json-qwen-layers-1e9", json.dumps({**QWEN3, "num_hidden_layers": 10**9}), "moe_layers"
    ),
    hf_case(
        "hf-json-qwen-layers-1e12-import",
        json.dumps({**QWEN3, "num_hidden_layers": 10**12}),
        "moe_layers",
        command="import",
    ),
    case(
        "hf-json-over-16-mib",
        "models",
        "import",
        HF,
        fragments=(HF, "size"),
        setup=big_file("config.json", 17 << 20),
    ),
]


# --- extreme values and the messages that name them -------------------------------------------
def nvme(d: dict[str, Any]) -> dict[str, Any]:
    (drive,) = [n for n in d["nodes"] if n["kind"] == "nvme"]
    return drive


EXTREME_CASES: list[Any] = [
    hw_case(
        "hw-link-bandwidth-1e-300",
        quiet_profile(lambda d: d["links"][0]["bandwidth_bytes_per_s"].update(value=1e-300)),
        "bandwidth_bytes_per_s",
        "1e-300",
    ),
    hw_case(
        "hw-flops-1e-300",
        quiet_profile(lambda d: gpu(d)["dense_bf16_flops"].update(value=1e-300)),
        "dense_bf16_flops",
    ),
    hw_case(
        "hw-hbm-1e300",
        quiet_profile(lambda d: gpu(d)["hbm_bytes"].update(value=1e300)),
        "hbm_bytes",
        "1e+300",
    ),
    hw_case(
        "hw-link-latency-1e300",
        quiet_profile(lambda d: d["links"][0]["latency_s"].update(value=1e300)),
        "latency_s",
    ),
    hw_case(
        "hw-nvme-queue-depth-1e9",
        quiet_profile(lambda d: nvme(d)["max_queue_depth"].update(value=10**9)),
        "max_queue_depth",
    ),
    rt_case(
        "rt-kernel-count-1e400",
        dump(mutated(RUNTIME, lambda d: d["kernels"]["attention"].update(value=10**400))),
        "attention",
    ),
    rt_case(
        "rt-efficiency-1e-300",
        dump(mutated(RUNTIME, lambda d: d["h2d_efficiency"].update(value=1e-300))),
        "h2d_efficiency",
    ),
    rt_case(
        "rt-workspace-1e300",
        dump(mutated(RUNTIME, lambda d: d["workspace_bytes"].update(value=1e300))),
        "workspace_bytes",
    ),
    set_case(
        "set-prefill-chunk-tokens-1e24",
        "workload.prefill_chunk_tokens=1000000000000000000000000",
        fragments=("prefill_chunk_tokens", "1000000000000000000000000"),
        command="run",
    ),
    set_case(
        "set-max-tokens-per-step-1e24",
        "workload.scheduler=continuous",
        "workload.max_tokens_per_step=1000000000000000000000000",
        fragments=("max_tokens_per_step",),
        command="run",
    ),
    set_case(
        "set-chunk-bytes-1e23",
        "timing.chunk_bytes=100000000000000000000000",
        fragments=("chunk_bytes",),
        command="run",
    ),
    case(
        "flag-cache-beyond-8-eib",
        "run",
        *SMALL[:4],
        "--cache",
        "1e9TiB",
        *RUN_PREV,
        fragments=("cache", "expected 'auto' or a size below 8 EiB, got '1e9TiB'"),
    ),
    case(
        "mrc-capacities-not-a-size",
        "mrc",
        *SMALL[:4],
        "--capacities",
        "5%,abc",
        fragments=("--capacities", "expected 'auto' or a size such as", "got 'abc'"),
    ),
]

CASES += WRITE_CASES + IMPORT_CASES + EXTREME_CASES


def _names(tmp: Path, w: World) -> dict[str, str]:
    return {"tmp": str(tmp), **w.names()}


def _prepare(c: Case, tmp: Path, w: World) -> None:
    for name, content in c.files.items():
        path = tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content.encode() if isinstance(content, str) else content)
    if c.setup is not None:
        c.setup(tmp, w)
    if c.plugin:
        (tmp / f"{EVIL_MODULE}.py").write_text(EVIL)


@pytest.mark.parametrize("c", CASES)
def test_bad_input_is_refused_in_one_line(c: Case, world: World, tmp_path: Path) -> None:
    _prepare(c, tmp_path, world)
    names = _names(tmp_path, world)
    args = [fill(a, names) for a in c.args]
    keep = [Path(fill(k, names)) for k in c.keep]
    before = {path: snapshot(path) for path in keep}
    cwd = Path(fill(c.cwd, names)) if c.cwd else None
    if cwd is not None:
        cwd.mkdir(parents=True, exist_ok=True)
    outcome = cli(*args, cwd=cwd, syspath=tmp_path if c.plugin else None)
    problems = user_error_problems(outcome, tuple(fill(f, names) for f in c.fragments))
    shared = [
        (Path(names[n]), world.saved[n]) for n in world.saved if f"{{{n}}}" in " ".join(c.args)
    ]
    for path, saved in [*before.items(), *shared]:
        if snapshot(path) != saved:
            problems.append(f"{path} was changed")
            restore(path, saved)
    if c.plugin and (tmp_path / "ran.txt").exists():
        problems.append(f"the plug-in module {EVIL_MODULE} was imported")
    assert not problems, f"{'; '.join(problems)} -- {describe(outcome)}"


# --- the API: SpecmdError, never ValueError, KeyError or TypeError ---------------------------


def _small(**more: Any) -> dict[str, Any]:
    return {"trace": "mixtral-synthetic", "workload": {"max_requests": 1},
            "cache": {"capacity": 16}, **more}  # fmt: skip


def _file(tmp: Path, name: str, content: str | bytes) -> Path:
    path = tmp / name
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    return path


def _api_build(data: Any) -> Callable[[Path], Any]:
    def call(tmp: Path) -> Any:
        from specmd_sim import build_config

        return build_config(data)

    return call


def _api_simulate(data: dict[str, Any], engine: str = "replay") -> Callable[[Path], Any]:
    def call(tmp: Path) -> Any:
        import specmd_sim

        config = specmd_sim.build_config(data)
        return getattr(specmd_sim, engine)(config).metrics

    return call


def _api_trace(content: bytes) -> Callable[[Path], Any]:
    def call(tmp: Path) -> Any:
        from specmd_sim import load_trace

        return load_trace(_file(tmp, "t.npz", content))

    return call


def _api_trace_in_run(content: bytes) -> Callable[[Path], Any]:
    def call(tmp: Path) -> Any:
        from specmd_sim import build_config, replay

        path = _file(tmp, "t.npz", content)
        return replay(build_config({"trace": str(path), "cache": {"capacity": 16}})).metrics

    return call


def _api_make_trace(experts: Any, **kw: Any) -> Callable[[Path], Any]:
    def call(tmp: Path) -> Any:
        from specmd_sim import make_trace

        return make_trace(experts, **{"model": "mixtral-8x7b", "num_experts": 8, **kw})

    return call


def _api_profile(text: str | bytes) -> Callable[[Path], Any]:
    def call(tmp: Path) -> Any:
        from specmd_sim import load_profile

        return load_profile(_file(tmp, "hw.yaml", text))

    return call


def _api_model(name: str, text: str | bytes) -> Callable[[Path], Any]:
    def call(tmp: Path) -> Any:
        from specmd_sim import load_model

        return load_model(str(_file(tmp, name, text)))

    return call


def _api_overrides(data: dict[str, Any], assignments: Any) -> Callable[[Path], Any]:
    def call(tmp: Path) -> Any:
        from specmd_sim import apply_overrides, build_config

        return build_config(apply_overrides(data, assignments))

    return call


def _api_sweep(text: str) -> Callable[[Path], Any]:
    def call(tmp: Path) -> Any:
        from specmd_sim import run_sweep

        return run_sweep(_file(tmp, "spec.yaml", text), tmp / "out", workers=1)

    return call


def _api_generate(seed: int, **knobs: Any) -> Callable[[Path], Any]:
    """The generator called directly (as a program would), with ``knobs`` set unvalidated."""

    def call(tmp: Path) -> Any:
        from specmd_sim import generate_trace
        from specmd_sim.traces import PRESETS

        return generate_trace(PRESETS["mixtral"].model_copy(update=knobs), seed)

    return call


def _api_sweep_into(text: str, out: str) -> Callable[[Path], Any]:
    def call(tmp: Path) -> Any:
        from specmd_sim import run_sweep

        (tmp / "f").write_text("mine")
        return run_sweep(_file(tmp, "spec.yaml", text), tmp / out, workers=1)

    return call


def _api_save_trace_into_folder(tmp: Path) -> Any:
    from specmd_sim import load_trace, save_trace

    (tmp / "d").mkdir()
    return save_trace(load_trace("mixtral-synthetic"), tmp / "d")


API_CASES = [
    pytest.param(_api_build({"seed": True}), ("seed",), id="api-build-seed-bool"),
    pytest.param(_api_build({"cache": None}), ("cache",), id="api-build-cache-null"),
    pytest.param(_api_build([("seed", 1)]), (), id="api-build-not-a-mapping"),
    pytest.param(_api_build({"eviction": 5}), ("eviction",), id="api-build-eviction-number"),
    pytest.param(
        _api_build({"eviction": {"kind": f"{EVIL_MODULE}:Policy"}}),
        ("eviction.kind",),
        id="api-build-plugin-not-loaded",
    ),
    pytest.param(
        _api_build({"timing": {"chunk_bytes": 4096}}),
        ("chunk_bytes",),
        id="api-build-chunk-bytes-4096",
    ),
    pytest.param(
        _api_build({"workload": {"requests": []}}), ("requests",), id="api-build-requests-empty"
    ),
    pytest.param(_api_overrides({}, ["seed.x=1"]), ("seed",), id="api-overrides-into-default"),
    pytest.param(
        _api_overrides({"seed": 3}, ["seed.x=1"]), ("seed",), id="api-overrides-into-a-number"
    ),
    pytest.param(_api_overrides({}, "seed=1"), ("--set",), id="api-overrides-a-string"),
    pytest.param(
        _api_overrides({}, [f"workload.requests={{{ALIAS_BOMB_FLOW}}}"]),
        ("workload.requests",),
        id="api-overrides-alias-bomb",
    ),
    pytest.param(
        _api_simulate(_small(memory={"nvme": "nvme9"}), "simulate"),
        ("nvme",),
        id="api-simulate-unknown-nvme",
    ),
    pytest.param(
        _api_simulate(_small(parallel={"gpus": ["gpu7"]}), "simulate"),
        ("gpus",),
        id="api-simulate-unknown-gpu-id",
    ),
    pytest.param(
        _api_simulate(_small(workload={"requests": [999]})),
        ("requests",),
        id="api-replay-unknown-request",
    ),
    pytest.param(
        _api_simulate(_small(workload={"arrivals": "trace", "max_requests": 1}), "simulate"),
        ("arrival",),
        id="api-simulate-arrivals-without-times",
    ),
    pytest.param(
        _api_simulate(_small(hardware="h100-pcie", cache={"capacity": "1e400B"})),
        ("capacity",),
        id="api-replay-capacity-1e400-bytes",
    ),
    pytest.param(_api_trace(b"not a zip"), ("t.npz",), id="api-load-trace-not-a-zip"),
    pytest.param(_api_trace(trace_with()[:300]), ("t.npz",), id="api-load-trace-truncated"),
    pytest.param(
        _api_trace(huge_header_npz(compress=True)), ("t.npz",), id="api-load-trace-huge-header"
    ),
    pytest.param(
        _api_trace(
            npz_bytes(
                {**trace_members(), "experts": np.array([[[0, 1]]] * 4, dtype=object)}, pickle=True
            )
        ),
        ("experts",),
        id="api-load-trace-pickled",
    ),
    pytest.param(
        _api_trace_in_run(trace_with(experts=experts_with(fill_value=-1))),
        ("experts",),
        id="api-replay-trace-all-minus-one",
    ),
    pytest.param(_api_make_trace([[[0, 1]], [[0]]]), ("experts",), id="api-make-trace-ragged"),
    pytest.param(
        _api_make_trace(np.array([[[0, 1]]], dtype=object)),
        ("experts",),
        id="api-make-trace-objects",
    ),
    pytest.param(
        _api_make_trace(np.zeros((1, 32, 2), np.float64)), ("experts",), id="api-make-trace-float"
    ),
    pytest.param(
        _api_make_trace(np.zeros((1, 32, 2), np.int16), num_experts=True),
        ("num_experts",),
        id="api-make-trace-num-experts-bool",
    ),
    pytest.param(
        _api_make_trace(np.zeros((1, 32, 2), np.int16), num_experts="8"),
        ("num_experts",),
        id="api-make-trace-num-experts-string",
    ),
    pytest.param(_api_profile(bomb("description: *i")), ("hw.yaml",), id="api-profile-alias-bomb"),
    pytest.param(_api_profile(f"nodes: {DEEP}\n"), ("hw.yaml",), id="api-profile-deep-nesting"),
    pytest.param(
        _api_profile(
            quiet_profile(lambda d: gpu(d)["copy_engines_h2d"].update(value=1_000_000_000))
        ),
        ("copy_engines_h2d",),
        id="api-profile-copy-engines-huge",
    ),
    pytest.param(_api_model("m.yaml", bomb("source: *i")), ("m.yaml",), id="api-model-alias-bomb"),
    pytest.param(
        _api_model("m.yaml", f"source: {DEEP}\n"), ("m.yaml",), id="api-model-deep-nesting"
    ),
    pytest.param(
        _api_model("config.json", '{"model_type": ' + DEEP + "}"),
        ("config.json",),
        id="api-model-json-deep-nesting",
    ),
    pytest.param(
        _api_model("config.json", json.dumps({**HF_MIXTRAL, "hidden_size": 1e400})),
        ("hidden_size",),
        id="api-model-json-inf",
    ),
    pytest.param(
        _api_sweep(
            spec(
                axes={
                    "seed": list(range(1000)),
                    "cache.capacity": list(range(1, 1001)),
                    "predictor.accuracy": [i / 1000 for i in range(1000)],
                }
            )
        ),
        ("spec.yaml",),
        id="api-sweep-grid-huge",
    ),
    pytest.param(
        _api_sweep(spec(axes={"eviction": [f"{EVIL_MODULE}:Policy"]})),
        ("eviction.kind",),
        id="api-sweep-plugin-not-loaded",
    ),
    pytest.param(_api_generate(-1), ("seed",), id="api-generate-seed-negative"),
    pytest.param(_api_sweep_into(spec(), "f"), ("out",), id="api-sweep-out-is-a-file"),
    pytest.param(
        _api_make_trace(trace_members(2)["experts"], request=np.zeros(3, np.int32)),
        ("request",),
        id="api-make-trace-request-wrong-length",
    ),
    pytest.param(_api_save_trace_into_folder, ("d",), id="api-save-trace-into-a-folder"),
]


@pytest.mark.parametrize(("call", "fragments"), API_CASES)
def test_api_raises_specmd_error(call: Callable[[Path], Any], fragments: tuple[str, ...],
                                 tmp_path: Path) -> None:  # fmt: skip
    (tmp_path / f"{EVIL_MODULE}.py").write_text(EVIL)  # importable, never to be imported
    outcome: Outcome = api(lambda: call(tmp_path), syspath=tmp_path)
    problems = api_error_problems(outcome, fragments)
    if (tmp_path / "ran.txt").exists():
        problems.append(f"the plug-in module {EVIL_MODULE} was imported")
    assert not problems, f"{'; '.join(problems)} -- {describe(outcome)}"


def test_the_catalogue_is_large_and_named() -> None:
    ids = [p.id for p in CASES] + [p.id for p in API_CASES]
    assert len(ids) == len(set(ids)), "case ids must be unique"
    assert len(ids) >= 110
    assert sys.platform.startswith("linux"), "the /proc/sys cases need Linux"

"""A policy outside the package, named in a config by its import path (``module:Class``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from support.cli import cli

from specmd_sim import build_config, replay, simulate
from specmd_sim.config import config_to_dict
from specmd_sim.errors import SpecmdError
from specmd_sim.policies import EVICTION, MISS, PREDICTORS, PREFETCH
from specmd_sim.sweep.executors import describe

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "my_policy"
SMALL = {"trace": "mixtral-synthetic", "workload": {"max_requests": 1}, "cache": {"capacity": 16}}


@pytest.fixture
def registries(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """The example folder and tmp_path importable; registry additions undone afterwards."""
    for registry in (EVICTION, PREFETCH, PREDICTORS, MISS):
        registry.kinds()  # load the bundled plug-ins first
        monkeypatch.setattr(registry, "_entries", dict(registry._entries))
    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    for name in ("my_policy", "not_a_policy", "broken_plugin", "evil_plugin"):
        sys.modules.pop(name, None)


def test_the_example_policy_runs_by_import_path(registries) -> None:
    config = build_config(
        {**SMALL, "eviction": {"kind": "my_policy:FarthestLayer"}}, plugins=["my_policy"]
    )
    assert config_to_dict(config)["eviction"] == {
        "kind": "my_policy:FarthestLayer", "recency_ties": True}  # fmt: skip
    # the resolved config names the plug-in portably: it validates again as it is
    assert build_config(config_to_dict(config)) == config
    cls = EVICTION.get("my_policy:FarthestLayer")
    assert cls.kind == "my_policy:FarthestLayer" and cls.__name__ == "FarthestLayer"
    assert issubclass(cls, EVICTION.get("farthest-layer"))  # registered by its module too
    result = replay(config)
    lru = replay(build_config({**SMALL, "eviction": "lru"}))
    assert result.metrics["accesses"] == lru.metrics["accesses"]
    assert result.metrics["hits"] != lru.metrics["hits"]  # the policy is really in use
    with pytest.raises(SpecmdError, match="recency_ties: expected true or false"):
        build_config({**SMALL, "eviction": {"kind": "my_policy:FarthestLayer",
                                            "recency_ties": "maybe"}})  # fmt: skip


def test_policies_list_shows_a_plugin_modules_policies(registries, monkeypatch, capsys) -> None:
    """``specmd policies list --plugin MODULE`` lists the module's plug-ins beside the
    built-ins, each with the import path a config names it by; a module that does not import
    is one line."""
    code, out, _ = cli(monkeypatch, capsys, "policies", "list", "--json", "--plugin", "my_policy")
    rows = json.loads(out)
    mine = [row for row in rows if "import_path" in row]
    assert code == 0 and [row["import_path"] for row in mine] == ["my_policy:FarthestLayer"]
    assert mine[0]["family"] == "eviction" and mine[0]["kind"] == "farthest-layer"
    assert len(rows) > len(mine) > 0  # (the built-ins too, without an import path)
    code, out, _ = cli(monkeypatch, capsys, "policies", "list", "--plugin", "my_policy")
    assert code == 0 and "farthest-layer (my_policy:FarthestLayer)" in out
    code, _, err = cli(monkeypatch, capsys, "policies", "list", "--plugin", "no_such_module")
    assert code == 2 and err.startswith("error: --plugin: expected an importable module, got ")
    assert err.count("\n") == 1


def test_a_module_the_user_imported_needs_no_plugins_argument(registries) -> None:
    import my_policy  # noqa: F401  (the user's program loads its own plug-in)

    config = build_config({**SMALL, "eviction": {"kind": "my_policy:FarthestLayer"}})
    assert config.eviction.kind == "my_policy:FarthestLayer"


EVIL = "import pathlib\npathlib.Path({marker!r}).write_text('ran')\n"


def test_a_config_never_imports_code(registries, tmp_path: Path) -> None:
    marker = tmp_path / "ran.txt"
    (tmp_path / "evil_plugin.py").write_text(EVIL.format(marker=str(marker)))
    for family in ("eviction", "prefetch", "predictor", "miss"):
        with pytest.raises(SpecmdError) as info:
            build_config({family: {"kind": "evil_plugin:Policy"}})
        assert str(info.value) == (
            f"config: {family}.kind: expected a plug-in of a loaded module (plug-in code is "
            "imported only on request: --plugin evil_plugin, or plugins=['evil_plugin'] in the "
            "API), got 'evil_plugin:Policy'"
        )
    assert not marker.exists() and "evil_plugin" not in sys.modules
    # asked for: it is imported (and then refused, as it registers nothing)
    with pytest.raises(SpecmdError, match="registered in the eviction registry"):
        build_config({"eviction": {"kind": "evil_plugin:Policy"}}, plugins=["evil_plugin"])
    assert marker.exists()
    del sys.modules["evil_plugin"]


def test_bad_import_paths_give_one_line(registries, tmp_path: Path) -> None:
    (tmp_path / "not_a_policy.py").write_text("class Thing:\n    kind = 'thing'\n")
    (tmp_path / "broken_plugin.py").write_text("raise RuntimeError('half-written module')\n")
    cases = [
        ("nowhere_xyz:Policy", ["nowhere_xyz"],
         "plugins: expected an importable module, got 'nowhere_xyz' (ModuleNotFoundError: "
         "No module named 'nowhere_xyz')"),
        ("broken_plugin:Policy", ["broken_plugin"],
         "plugins: expected an importable module, got 'broken_plugin' (RuntimeError: "
         "half-written module)"),
        ("x:P", ["os; rm"], "plugins: expected a module name (a.b.c), got 'os; rm'"),
        ("my_policy:Missing", ["my_policy"],
         "eviction.kind: expected a class registered in the eviction registry, got "
         "'my_policy:Missing'"),
        (":Policy", [], "eviction.kind: expected 'module:Class', got ':Policy'"),
        ("my_policy:", [], "eviction.kind: expected 'module:Class', got 'my_policy:'"),
        ("os:system", [],  # loaded, but not a plug-in: nothing is called
         "eviction.kind: expected a class registered in the eviction registry, got 'os:system'"),
        ("not_a_policy:Thing", ["not_a_policy"],
         "expected a class registered in the eviction registry"),
    ]  # fmt: skip
    for kind, plugins, fragment in cases:
        with pytest.raises(SpecmdError) as info:
            build_config({"eviction": {"kind": kind}}, plugins=plugins)
        assert fragment in str(info.value), str(info.value)
    # an eviction policy is not a prefetch policy
    with pytest.raises(SpecmdError, match="registered in the prefetch registry"):
        build_config({"prefetch": {"kind": "my_policy:FarthestLayer"}}, plugins=["my_policy"])


# --- the command line ------------------------------------------------------------------------


RUN = ["replay", "--trace", "mixtral-synthetic", "--cache", "16", "--set",
       "workload.max_requests=1"]  # fmt: skip
UNLOADED = (
    "error: {source}: eviction.kind: expected a plug-in of a loaded module (plug-in code is "
    "imported only on request: --plugin evil_plugin, or plugins=['evil_plugin'] in the API), "
    "got 'evil_plugin:Policy'\n"
)


def test_the_command_line_imports_only_what_plugin_names(
    registries, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    marker = tmp_path / "ran.txt"
    (tmp_path / "evil_plugin.py").write_text(EVIL.format(marker=str(marker)))
    config = tmp_path / "c.yaml"
    config.write_text("eviction: {kind: 'evil_plugin:Policy'}\n")
    spec = tmp_path / "s.yaml"
    spec.write_text(
        "engine: replay\nbase: {trace: mixtral-synthetic, workload: {max_requests: 1}}\n"
        "axes: {eviction: ['evil_plugin:Policy', lru]}\n"
    )
    refused = [
        ([*RUN, "--eviction", "evil_plugin:Policy"], "config"),
        ([*RUN, "--set", "eviction.kind=evil_plugin:Policy"], "config"),
        ([*RUN, "--config", str(config)], str(config)),
        (["sweep", str(spec), "--out", str(tmp_path / "s")],
         f"sweep spec {spec}: point 0 (eviction=evil_plugin:Policy)"),
    ]  # fmt: skip
    for args, source in refused:
        code, out, err = cli(monkeypatch, capsys, *args, "--out", str(tmp_path / "out"))
        assert (code, out, err) == (2, "", UNLOADED.format(source=source)), args
    assert not marker.exists() and not (tmp_path / "out").exists()
    code, _, err = cli(monkeypatch, capsys, *RUN, "--plugin", "nowhere_xyz")
    assert (code, err) == (2, "error: --plugin: expected an importable module, got "
                              "'nowhere_xyz' (ModuleNotFoundError: No module named "
                              "'nowhere_xyz')\n")  # fmt: skip


def test_plugin_loads_the_example_for_run_and_every_sweep_worker(
    registries, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    args = [*RUN, "--eviction", "my_policy:FarthestLayer", "--json"]
    code, out, err = cli(monkeypatch, capsys, *args, "--plugin", "my_policy",
                         "--out", str(tmp_path / "run"))  # fmt: skip
    assert code == 0, err
    direct = replay(build_config({**SMALL, "eviction": {"kind": "my_policy:FarthestLayer"}}))
    assert json.loads(out)["hits"] == direct.metrics["hits"]
    spec = tmp_path / "s.yaml"
    spec.write_text(
        "engine: replay\nbase: {trace: mixtral-synthetic, workload: {max_requests: 1}, "
        "cache: {capacity: 16}}\naxes: {eviction: ['my_policy:FarthestLayer', lru]}\n"
    )
    code, out, err = cli(monkeypatch, capsys, "sweep", str(spec), "--out", str(tmp_path / "s"),
                         "--workers", "2", "--plugin", "my_policy")  # fmt: skip
    assert code == 0 and "2 points: 2 ok, 0 failed" in out, err
    from specmd_sim.sweep import load_table

    table = load_table(tmp_path / "s")
    assert table["hits"].tolist()[0] == direct.metrics["hits"]


def test_regress_run_trusts_a_plugin_of_a_result_only_by_plugin(
    registries, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """``regress --run`` reads a run folder, maybe someone else's: a plug-in its result names
    by import path is never imported; the error says which --plugin would load it."""
    from specmd_sim.runs import MANIFEST, config_hash, write_manifest, write_run

    config = build_config({**SMALL, "eviction": {"kind": "my_policy:FarthestLayer"}},
                          plugins=["my_policy"])  # fmt: skip
    run, base = tmp_path / "run", tmp_path / "b.json"
    write_run(run, replay(config))
    args = ["regress", str(base), "--run", str(run)]
    code, _, err = cli(monkeypatch, capsys, *args, "--update", "--plugin", "my_policy")
    assert code == 0, err
    point = json.loads(base.read_text())["points"]["run"]
    assert point["point_id"] == f"replay-{config_hash(config)}"
    marker = tmp_path / "ran.txt"
    (tmp_path / "evil_plugin.py").write_text(EVIL.format(marker=str(marker)))
    result = json.loads((run / "result.json").read_text())
    result["config"]["eviction"] = {"kind": "evil_plugin:Policy"}
    (run / "result.json").write_text(json.dumps(result))
    write_manifest(run, [run / name for name in json.loads((run / MANIFEST).read_text())["files"]])
    code, out, err = cli(monkeypatch, capsys, *args)
    assert (code, out, err) == (2, "", UNLOADED.format(source=f"{run / 'result.json'}: config"))
    assert not marker.exists() and "evil_plugin" not in sys.modules


FAULTY = """
from typing import Literal

from specmd_sim.policies import EVICTION
from specmd_sim.policies.eviction.base import EvictionPolicy
from specmd_sim.policies.plugin import PluginConfig


class FaultyConfig(PluginConfig):
    kind: Literal["faulty"] = "faulty"
    fault: str = "raise"


@EVICTION.register
class Faulty(EvictionPolicy[FaultyConfig]):
    description = source = "tests"

    def __init__(self, config, ctx):
        super().__init__(config, ctx)
        self.keys = {}

    def on_insert(self, key, reason):
        self.keys[key] = None

    def on_remove(self, key):
        del self.keys[key]

    def on_access(self, key):
        if self.config.fault == "raise":
            raise ValueError("boom in on_access")
        self.ctx.history.keys_of(10**6, 0)  # (the future: the run refuses it)

    def choose_victim(self, evictable, incoming):
        return next((k for k in self.keys if evictable(k)), None)
"""


@pytest.mark.parametrize(
    ("fault", "said"),
    [
        ("raise", "plug-in faulty_plugin (faulty_plugin.py:30, in on_access): ValueError: boom "
                  "in on_access"),
        ("future", "plug-in faulty_plugin (faulty_plugin.py:31, in on_access): "
                   "FutureAccessError: "),
    ],
)  # fmt: skip
def test_a_failure_in_a_plugins_code_is_one_line_naming_it(
    registries, tmp_path: Path, monkeypatch, capsys, fault: str, said: str
) -> None:
    """An exception raised in the user's plug-in, or by a check of what it called (reading the
    future), is one line naming the plug-in's module, file, line and hook, exit 2, not a
    traceback; in a sweep, the point's error says the same."""
    (tmp_path / "faulty_plugin.py").write_text(FAULTY)
    try:
        code, _, err = cli(monkeypatch, capsys, "replay", "--plugin", "faulty_plugin",
                           "--eviction", "faulty_plugin:Faulty", "--set",
                           f"eviction.fault={fault}", "--out", str(tmp_path / "run"))  # fmt: skip
        config = build_config({**SMALL, "eviction": {"kind": "faulty_plugin:Faulty",
                                                     "fault": fault}})  # fmt: skip
        with pytest.raises(Exception) as info:
            replay(config)
    finally:
        sys.modules.pop("faulty_plugin", None)
    assert code == 2 and err.startswith(f"error: {said}") and err.count("\n") == 1, err
    assert describe(info.value).startswith(said)  # (a sweep point's error)


STRAY = """
from typing import Literal

import numpy as np

from specmd_sim.policies import PREDICTORS, PREFETCH
from specmd_sim.policies.plugin import PluginConfig
from specmd_sim.policies.predictors.base import Predictor
from specmd_sim.policies.prefetch.base import PrefetchPolicy


class StrayConfig(PluginConfig):
    kind: Literal["stray"] = "stray"
    lookahead: int = 1
    keys: str = "neg"


@PREFETCH.register
class Stray(PrefetchPolicy[StrayConfig]):
    description = source = "tests"
    uses_predictor = False

    def plan(self, pass_index, layer, predictor, cache):
        e = self.num_experts
        return {"neg": [-5], "past": [max(layer - 1, 0) * e], "none": None,
                "float": [float((layer + 1) * e)],
                "ok": [(layer + 1) * e] if layer + 1 < self.num_layers else []}[self.config.keys]


class ShortConfig(PluginConfig):
    kind: Literal["short"] = "short"


@PREDICTORS.register
class Short(Predictor[ShortConfig]):
    description = source = "tests"

    def scores(self, pass_index, layer, target):
        return np.ones(3)
"""


PLANNED = (
    r"^prefetch stray_plugin:Stray: plan at pass 0, layer 0: expected a list of expert keys of "
    r"layers 1 to 1 \(8 to 15\), got "
)


@pytest.mark.parametrize("keys", ["neg", "past", "none", "float"])
def test_a_plugins_plan_outside_its_layers_is_one_line(registries, tmp_path: Path, keys: str):
    """A user's prefetcher that plans keys its contract does not allow (another layer's, a
    negative one, a float, None) stops the run naming it, the pass and layer, the keys it may
    plan and what it gave: before, a negative key was blamed on the eviction policy (replay)
    or fetched as another expert (the timing engine), another layer's silently wasted."""
    (tmp_path / "stray_plugin.py").write_text(STRAY)
    try:
        for engine in (replay, simulate):
            config = build_config({**SMALL, "prefetch": {"kind": "stray_plugin:Stray",
                                                         "keys": keys}},
                                  plugins=["stray_plugin"])  # fmt: skip
            with pytest.raises(SpecmdError, match=PLANNED):
                engine(config)
        fine = {**SMALL, "prefetch": {"kind": "stray_plugin:Stray", "keys": "ok"}}
        replay(build_config(fine, plugins=["stray_plugin"]))
        short = {**SMALL, "predictor": "stray_plugin:Short", "prefetch": "top-k"}
        with pytest.raises(SpecmdError, match=r"^predictor stray_plugin:Short: scores at pass 0, "
                                              r"layer 0 for layer 1: expected 8 numbers \(one "
                                              r"per expert\), got "):  # fmt: skip
            replay(build_config(short, plugins=["stray_plugin"]))
    finally:
        sys.modules.pop("stray_plugin", None)


ODD = """
from typing import Literal

from specmd_sim.policies import MISS
from specmd_sim.policies.miss.base import FETCH, MissDecision, MissHandler, substitute
from specmd_sim.policies.plugin import PluginConfig


class OddConfig(PluginConfig):
    kind: Literal["odd"] = "odd"
    gives: str = "none"


@MISS.register
class Odd(MissHandler[OddConfig]):
    description = source = "tests"

    def decide(self, pass_index, layer, key, cache, taken):
        e = self.ctx.num_experts
        resident = [k for k in range(layer * e, (layer + 1) * e) if cache.state[k] == 2]
        free = [k for k in resident if k not in taken]
        absent = [k for k in range(layer * e, (layer + 1) * e) if cache.state[k] == 0]
        return {
            "none": lambda: None,
            "text": lambda: "fetch",
            "bare action": lambda: MissDecision("drop"),
            "other layer": lambda: substitute(((layer + 1) % self.ctx.num_layers) * e),
            "absent": lambda: substitute(absent[0]) if absent else FETCH,
            "taken": lambda: substitute(min(t)) if (t := set(taken) & set(resident)) else FETCH,
            "fine": lambda: substitute(free[0]) if free else FETCH,
        }[self.config.gives]()
"""


@pytest.mark.parametrize(
    ("gives", "said"),
    [
        ("none", "got None"),
        ("text", "got 'fetch'"),
        ("bare action", "got MissDecision(action='drop', by=-1)"),
        ("other layer", "got a substitute of another layer: "),
        ("absent", "got a substitute that is not resident: "),
        ("taken", "got a substitute the layer runs already: "),
    ],
)
def test_a_miss_handlers_stray_decision_is_one_line(registries, tmp_path: Path, gives, said):
    """A user's miss handler whose decision its contract does not allow stops the run naming
    it, the pass, layer and key, what it may decide and what it gave: before, None or a string
    gave a traceback in the layer step, and a substitute of another layer, of an absent expert
    or of one the layer runs already silently ran it (an expert the cache did not hold)."""
    (tmp_path / "odd_plugin.py").write_text(ODD)
    try:
        for engine in (replay, simulate):
            config = build_config({**SMALL, "miss": {"kind": "odd_plugin:Odd", "gives": gives}},
                                  plugins=["odd_plugin"])  # fmt: skip
            with pytest.raises(SpecmdError) as info:
                engine(config)
            line = str(info.value)
            assert line.startswith("miss odd_plugin:Odd: decide at pass "), line
            assert "expected FETCH, DROP, CPU or substitute(k) of a resident key of layer " in line
            assert said in line and "\n" not in line, line
        fine = {**SMALL, "miss": {"kind": "odd_plugin:Odd", "gives": "fine"}}
        assert (
            replay(build_config(fine, plugins=["odd_plugin"])).metrics["activations_substituted"]
            > 0
        )
    finally:
        sys.modules.pop("odd_plugin", None)

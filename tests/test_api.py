"""The public API is pinned: changing it is a deliberate act."""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import inspect

import pytest

import specmd_sim


def test_public_api() -> None:
    assert sorted(specmd_sim.__all__) == [
        "RunResult", "SimConfig", "SpecmdError", "__version__", "apply_overrides",
        "build_config", "formed_schedule", "generate_trace", "list_models", "list_profiles",
        "load_model", "load_plugins", "load_profile", "load_trace", "make_trace", "replay",
        "run_sweep", "save_trace", "simulate",
    ]  # fmt: skip
    for name in specmd_sim.__all__:
        assert hasattr(specmd_sim, name), name
    assert set(specmd_sim.__all__) <= set(dir(specmd_sim))
    assert specmd_sim.__version__ == importlib.metadata.version("specmd-sim")


def test_lazy_names_are_the_objects_of_their_modules() -> None:
    """Each name is its defining module's object; ``__all__``, the lazy table and the imports
    shown to type checkers (``if TYPE_CHECKING:``) list the same names."""
    from specmd_sim import simulate
    from specmd_sim.engine.sim import simulate as defined

    assert simulate is defined
    lazy = specmd_sim._LAZY
    assert set(specmd_sim.__all__) == {"__version__", *lazy}
    for name, module in lazy.items():
        assert getattr(specmd_sim, name) is getattr(importlib.import_module(module), name)
    tree = ast.parse(inspect.getsource(specmd_sim))
    (block,) = [n for n in tree.body if isinstance(n, ast.If)]
    assert ast.unparse(block.test) == "TYPE_CHECKING"
    shown = {a.name: n.module for n in block.body if isinstance(n, ast.ImportFrom) for a in n.names}
    assert shown == lazy


@pytest.mark.parametrize("engine", ["simulate", "replay"])
@pytest.mark.parametrize("config", [{"seed": 0}, None, "config.yaml"])
def test_an_engine_given_no_config_says_what_it_takes(engine: str, config: object) -> None:
    """A mapping, None or a path instead of a SimConfig: one TypeError naming what it takes
    (and build_config for a mapping), not an AttributeError from deep in the scenario."""
    with pytest.raises(TypeError, match=f"expected a SimConfig .*build_config.*, got "
                                        f"{type(config).__name__}$"):  # fmt: skip
        getattr(specmd_sim, engine)(config)


@pytest.mark.parametrize("warm", [[-5], [1024], ["3"], [0, 2.0]])
def test_replay_warm_keys_out_of_the_model_are_one_line(warm: list) -> None:
    """``replay(config, warm=...)`` takes expert keys of the model (OLMoE: 16 x 64 = 1,024):
    another is refused on both paths, where the compiled one changed the answer silently and
    the Python one blamed the eviction policy (or raised an IndexError)."""
    said = r"^warm: expected expert keys from 0 to 1023 \(layer x 64 \+ expert\)"
    for compiled in (None, False):
        with pytest.raises(specmd_sim.SpecmdError, match=said):
            specmd_sim.replay(specmd_sim.SimConfig(seed=3), warm=warm, compiled=compiled)

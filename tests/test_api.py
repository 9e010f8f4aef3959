"""The public API is pinned: changing it is a deliberate act."""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import inspect

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

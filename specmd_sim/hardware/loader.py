"""Load and list hardware profiles: by bundled id (``h100-pcie``) or by a YAML file path."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from specmd_sim._data import data_dir
from specmd_sim.errors import SpecmdError, from_validation_error
from specmd_sim.hardware.schema import HardwareProfile

M = TypeVar("M", bound=BaseModel)


def profile_dir() -> Path:
    return data_dir("hardware_profiles")


def list_profiles() -> list[str]:
    """Ids of the bundled profiles, sorted."""
    return sorted(p.stem for p in profile_dir().glob("*.yaml"))


MAX_YAML_NODES = 1_000_000  # after aliases are expanded; a hand-written file has thousands
MAX_YAML_DEPTH = 100  # levels of nesting; a hand-written file has fewer than 10


def load_yaml(path: Path, what: str) -> object:
    """Read a YAML file with a one-line error naming ``what`` and the file on a missing file,
    a bad encoding, or any refusal of :func:`parse_yaml`."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecmdError(f"{what} {path}: cannot read file ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise SpecmdError(f"{what} {path}: expected UTF-8 text, got {exc.reason} at byte "
                          f"{exc.start}") from None  # fmt: skip
    return parse_yaml(text, f"{what} {path}")


class YamlSyntaxError(SpecmdError):
    """A document that is not YAML (as opposed to one beyond the bounds)."""


def parse_yaml(text: str, source: str) -> object:
    """The YAML document ``text``, with a one-line error naming ``source`` on bad syntax, on
    nesting deeper than :data:`MAX_YAML_DEPTH` levels (composing a document recurses once per
    level), and on a document that aliases expand beyond :data:`MAX_YAML_NODES` nodes (an
    "alias bomb": a few lines that stand for billions of values).

    Parsed by libyaml where PyYAML has it (its wheels do; ~7x faster on the bundled files), by
    PyYAML's own parser otherwise and for any document libyaml refuses: so an error is worded
    and placed by PyYAML's parser, whichever is installed. The nodes are composed in Python
    either way, where the bounds are checked."""
    if _FastLoader is not None:
        try:
            return _load(_FastLoader(text, source))
        except yaml.YAMLError:
            pass
    try:
        return _load(_BoundedLoader(text, source))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise YamlSyntaxError(f"{source}: malformed YAML{where}: {problem}") from None


def _load(loader: _BoundedComposer) -> object:
    """The document ``loader`` holds, once within the bounds of :func:`parse_yaml`."""
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        size = _expanded_size(node)
        if size > MAX_YAML_NODES:
            raise SpecmdError(
                f"{loader.source}: expected at most {MAX_YAML_NODES:,} values once aliases are "
                f"expanded, got {'a recursive alias' if size == math.inf else f'{size:,}'}"
            )
        return loader.construct_document(node)  # type: ignore[attr-defined]
    finally:
        loader.dispose()  # type: ignore[attr-defined]


class _BoundedComposer(yaml.composer.Composer):
    """A composer that refuses nesting deeper than :data:`MAX_YAML_DEPTH` levels."""

    source: str
    depth: int

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if self.depth == MAX_YAML_DEPTH and self.check_event(  # type: ignore[attr-defined]
            yaml.SequenceStartEvent, yaml.MappingStartEvent
        ):
            mark = self.peek_event().start_mark  # type: ignore[attr-defined]
            raise SpecmdError(
                f"{self.source}: expected at most {MAX_YAML_DEPTH} levels of nesting, got more "
                f"at line {mark.line + 1}, column {mark.column + 1}"
            )
        self.depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


class _BoundedLoader(_BoundedComposer, yaml.SafeLoader):
    """PyYAML's safe loader, bounded."""

    def __init__(self, text: str, source: str) -> None:
        yaml.SafeLoader.__init__(self, text)
        self.source, self.depth = source, 0


_FastLoader: Callable[[str, str], _BoundedComposer] | None = None
if yaml.__with_libyaml__:

    class _FastBoundedLoader(_BoundedComposer, yaml.CSafeLoader):
        """libyaml's safe loader, bounded: its parser's events composed by the Python composer
        (which comes first), not by its own composer in C."""

        def __init__(self, text: str, source: str) -> None:
            yaml.CSafeLoader.__init__(self, text)
            yaml.composer.Composer.__init__(self)  # (libyaml's loader lacks its state)
            self.source, self.depth = source, 0

    _FastLoader = _FastBoundedLoader


def _expanded_size(root: yaml.Node) -> float:
    """Nodes of the document with every alias expanded, counted over the composed graph (each
    shared node once), without expanding it; infinite for a node that contains itself."""
    sizes: dict[int, float] = {}
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    open_: set[int] = set()
    while stack:
        node, done = stack.pop()
        if id(node) in sizes and not done:
            continue
        children = _children(node)
        if done:
            open_.discard(id(node))
            sizes[id(node)] = 1 + sum(sizes[id(c)] for c in children)
            continue
        if id(node) in open_:
            return math.inf
        open_.add(id(node))
        stack.append((node, True))
        for child in children:
            if id(child) in open_:
                return math.inf
            if id(child) not in sizes:
                stack.append((child, False))
    return sizes[id(root)]


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def load_bundled(
    ref: str | Path, folder: Path, bundled: list[str], schema: type[M], what: str
) -> M:
    """A YAML file by bundled id (a file stem in ``folder``) or path, validated as ``schema``;
    one-line errors naming ``what`` and the file."""
    path = Path(ref)
    if path.suffix not in (".yaml", ".yml"):
        path = folder / f"{ref}.yaml"
        if not path.is_file():
            raise SpecmdError(
                f"{what}: expected a bundled id ({', '.join(bundled)}) or a path to a .yaml "
                f"file, got {str(ref)!r}"
            )
    return load_validated(path, schema, what)


def load_validated(path: Path, schema: type[M], what: str) -> M:
    """A YAML file holding one mapping, validated as ``schema``; one-line errors naming
    ``what`` and the file."""
    data = load_yaml(path, what)
    if not isinstance(data, dict):
        raise SpecmdError(
            f"{what} {path}: expected a YAML mapping at the top level, got {type(data).__name__}"
        )
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        raise from_validation_error(f"{what} {path}", exc) from None


def load_profile(ref: str | Path) -> HardwareProfile:
    """Load a profile by bundled id or by path to a YAML file; validate it."""
    return load_bundled(ref, profile_dir(), list_profiles(), HardwareProfile, "hardware profile")

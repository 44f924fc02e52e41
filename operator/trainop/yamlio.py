"""YAML in and out for the CLI: dumps that kubectl reads back unchanged, loads that flatten v1 Lists.

Why not plain `yaml.safe_dump`: PyYAML resolves scalars by YAML 1.1 rules, so it leaves strings
such as "08", "1e3" or "y" unquoted, and kubectl (YAML 1.2 numbers, YAML 1.1 booleans) reads
them back as an int, a float and a bool: an env value or a label turned into a number once
broke a deployment. `dump_yaml` quotes every string that some YAML 1.1 or 1.2 parser would
resolve to anything but a string, and never writes anchors/aliases (the builders share
sub-objects, e.g. one node-affinity expression in several terms, and `&id001` confuses people).
Loads are bounded (`YamlLimits`): input size, nesting depth, and the nodes that aliases add. A
YAML alias is a reference, so a 1 KB "billion laughs" stream (`b: [*a, *a, ...]` nine levels
deep) loads as a small shared graph, then expands to ~10^9 objects in whatever walks it
(validation, copies, JSON): the loader measures each composed document before constructing it.
See https://en.wikipedia.org/wiki/Billion_laughs_attack and the YAML 1.2 spec on aliases,
https://yaml.org/spec/1.2.2/#71-alias-nodes.
Pure: text in, data out; the CLI reads and writes the files.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

__all__ = [
    "DEFAULT_LIMITS",
    "YamlInputError",
    "YamlLimits",
    "dump_yaml",
    "dump_yaml_all",
    "load_yaml",
    "load_yaml_documents",
    "needs_quotes",
]

# YAML 1.1 booleans (go-yaml v2, which kubectl's sigs.k8s.io/yaml uses, includes y/n) and the
# null spellings of both versions.
_KEYWORDS = frozenset(
    {
        "y",
        "Y",
        "yes",
        "Yes",
        "YES",
        "n",
        "N",
        "no",
        "No",
        "NO",
        "true",
        "True",
        "TRUE",
        "false",
        "False",
        "FALSE",
        "on",
        "On",
        "ON",
        "off",
        "Off",
        "OFF",
        "null",
        "Null",
        "NULL",
        "~",
    }
)
# YAML 1.1 sexagesimal numbers: 190:20:30 (int), 190:20:30.15 (float).
_SEXAGESIMAL = re.compile(r"[-+]?[0-9][0-9_]*(:[0-5]?[0-9])+(\.[0-9_]*)?")
_DECIMAL = re.compile(r"[-+]?[0-9]+")  # YAML 1.2 core int: leading zeros allowed ("08" is 8)
_RESOLVER = yaml.resolver.Resolver()  # PyYAML's own YAML 1.1 implicit typing
_STR = "tag:yaml.org,2002:str"
_HEX_FLOAT = re.compile(r"[-+]?0[xX][0-9a-fA-F]*\.?[0-9a-fA-F]*[pP][-+]?[0-9]+")


def _numeric(text: str) -> bool:
    """Whether a YAML 1.1/1.2 resolver, or Go's strconv behind go-yaml, reads a number."""
    # Resolvers only try numbers on a leading digit, sign or dot; 1.1 and Go drop underscores.
    t = text.replace("_", "")
    if not t or t[0] not in "0123456789+-.":
        return False
    if _DECIMAL.fullmatch(t) or _SEXAGESIMAL.fullmatch(text) or _HEX_FLOAT.fullmatch(t):
        return True
    try:
        int(t, 0)  # 0x1f, 0o17, 0b101
        return True
    except ValueError:
        pass
    try:
        float(t)  # 1e3, .5, 1., -inf, +nan
        return True
    except ValueError:
        return False


def needs_quotes(text: str) -> bool:
    """Whether `text`, written as a plain scalar, would be read back as a non-string."""
    if text in _KEYWORDS or text.strip() != text or not text:
        return True
    if text.lower() in {".inf", "+.inf", "-.inf", ".nan", "<<", "="}:
        return True
    if _numeric(text):
        return True
    # Whatever else PyYAML itself resolves (timestamps such as 2024-01-31, ...).
    return bool(_RESOLVER.resolve(yaml.ScalarNode, text, (True, False)) != _STR)


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


def _represent_str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    style: str | None = None
    if not data.replace("\n", "").isprintable():
        style = '"'  # escapes: tabs, NEL and other breaks would be folded in other styles
    elif "\n" in data:
        style = "|"  # scripts in args stay readable; PyYAML falls back to quotes if it must
    elif needs_quotes(data):
        style = "'"
    return dumper.represent_scalar("tag:yaml.org,2002:str", str(data), style=style)


_Dumper.add_representer(str, _represent_str)
# str enums (trainop.api.reasons.WaitReason, queueing's Action) dump as their string.
_Dumper.add_multi_representer(str, _represent_str)


def _plain(obj: Any) -> Any:
    """Mappings -> dicts and tuples -> lists, so frozen views and dataclass outputs dump too."""
    if isinstance(obj, Mapping):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_plain(v) for v in obj]
    return obj


_DUMP_OPTS: dict[str, Any] = {
    "Dumper": _Dumper,
    "sort_keys": False,  # keep the builders' order: apiVersion, kind, metadata, spec
    "default_flow_style": False,
    "allow_unicode": True,
    "width": 1 << 20,  # never fold long values (TF_CONFIG, NCCL_IB_HCA) over several lines
}


def dump_yaml(obj: Any) -> str:
    """One YAML document (no leading '---'), block style, without anchors or aliases."""
    out: str = yaml.dump(_plain(obj), **_DUMP_OPTS)
    return out


def dump_yaml_all(objs: Iterable[Any]) -> str:
    """A multi-document stream, every document opened by '---'; '' for no documents."""
    out: str = yaml.dump_all([_plain(o) for o in objs], explicit_start=True, **_DUMP_OPTS)
    return out


class YamlInputError(ValueError):
    """The text is not YAML, or a document is not an object; the message says where."""


# libyaml's parser when PyYAML has it: a 1,400-line `kubectl get nodes -o yaml` loads 10x faster.
_SafeLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_SafeLoader):  # type: ignore[valid-type,misc]
    pass


def _timestamp_as_text(loader: yaml.SafeLoader, node: yaml.Node) -> str:
    # Kubernetes objects are JSON: a date is a string there, and a datetime would break -o json.
    return str(loader.construct_scalar(node))  # type: ignore[arg-type]


_Loader.add_constructor("tag:yaml.org,2002:timestamp", _timestamp_as_text)


@dataclass(frozen=True)
class YamlLimits:
    """What one load may cost. Kubernetes objects rarely use aliases at all; the largest honest
    inputs are `kubectl get nodes -o yaml` dumps of a few thousand nodes (a few MiB)."""

    max_bytes: int = 16 << 20  # the whole stream (characters of decoded text)
    max_alias_nodes: int = 100_000  # per document: nodes that aliases add beyond the text's own
    max_depth: int = 200  # per document: nested collections (libyaml itself stops at 1,000)


DEFAULT_LIMITS = YamlLimits()


class _Measure:
    """Walks a composed document once: counts its nodes as written and, per collection, the
    nodes it holds once every alias is expanded (memoized: a shared node is walked once, so a
    bomb costs what its text costs). Recursion stops at `max_depth`, counted with aliases
    expanded; an alias to its own ancestor (infinite expansion) is refused."""

    def __init__(self, max_depth: int) -> None:
        self.max_depth = max_depth
        self.written = 0
        self._sized: dict[int, tuple[int, int]] = {}  # id(collection) -> (expanded, height)
        self._open: set[int] = set()  # collections on the current path

    def _too_deep(self) -> YamlInputError:
        return YamlInputError(f"nested more than {self.max_depth} levels deep, over the limit")

    def visit(self, node: yaml.Node, level: int = 1) -> tuple[int, int]:
        """(expanded nodes, height) of `node`, found at nesting `level`."""
        if level > self.max_depth:
            raise self._too_deep()
        value = node.value
        if isinstance(value, str):  # a scalar
            self.written += 1
            return 1, 1
        key = id(node)
        sized = self._sized.get(key)
        if sized is not None:  # an alias to a collection already walked
            if level + sized[1] - 1 > self.max_depth:
                raise self._too_deep()
            return sized
        if key in self._open:
            raise YamlInputError("an alias refers to its own ancestor (infinite expansion)")
        self._open.add(key)
        self.written += 1
        size, height = 1, 0
        kids = value if isinstance(node, yaml.SequenceNode) else [n for kv in value for n in kv]
        for kid in kids:
            kid_size, kid_height = self.visit(kid, level + 1)
            size += kid_size
            height = max(height, kid_height)
        self._open.discard(key)
        self._sized[key] = (size, height + 1)
        return size, height + 1


def _check_document(node: yaml.Node, limits: YamlLimits) -> None:
    measure = _Measure(limits.max_depth)
    expanded, _ = measure.visit(node)
    if expanded - measure.written > limits.max_alias_nodes:
        raise YamlInputError(
            f"aliases expand it by {expanded - measure.written:,} nodes, over the limit of "
            f"{limits.max_alias_nodes:,} (an alias bomb?); write the values out instead"
        )


def _check_size(text: str, limits: YamlLimits) -> None:
    if len(text) > limits.max_bytes:
        raise YamlInputError(
            f"{len(text):,} bytes, over the limit of {limits.max_bytes:,} bytes for YAML input"
        )


def _yaml_error(exc: yaml.YAMLError, source: str) -> YamlInputError:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    return YamlInputError(f"{source}: not valid YAML{where}: {problem}")


def _load_stream(text: str, source: str, limits: YamlLimits) -> list[Any]:
    """Every document of the stream, each measured against `limits` before it is built."""
    try:
        _check_size(text, limits)
    except YamlInputError as exc:
        raise YamlInputError(f"{source}: {exc}") from None
    loader = _Loader(text)
    docs: list[Any] = []
    try:
        while loader.check_node():
            node = loader.get_node()
            try:
                _check_document(node, limits)
            except YamlInputError as exc:
                raise YamlInputError(f"{source}: document {len(docs) + 1}: {exc}") from None
            docs.append(loader.construct_document(node))
    except yaml.YAMLError as exc:
        raise _yaml_error(exc, source) from None
    finally:
        loader.dispose()
    return docs


def load_yaml(text: str, source: str = "<input>", limits: YamlLimits = DEFAULT_LIMITS) -> Any:
    """The one document of `text` (None when empty), loaded safely within `limits`; dates stay
    strings. For data files (catalog, fleet). Raises YamlInputError naming `source`."""
    docs = _load_stream(text, source, limits)
    if len(docs) > 1:
        raise YamlInputError(f"{source}: expected one YAML document, found {len(docs)}")
    return docs[0] if docs else None


def _flatten(doc: Any, where: str) -> list[dict[str, Any]]:
    if doc is None:
        return []
    if not isinstance(doc, dict):
        raise YamlInputError(
            f"{where}: expected an object (a mapping with apiVersion and kind), "
            f"got {type(doc).__name__}"
        )
    kind = doc.get("kind")
    items = doc.get("items")
    if isinstance(kind, str) and kind.endswith("List") and "items" in doc:
        if items is None:
            return []
        if not isinstance(items, list):
            raise YamlInputError(f"{where}: items of a {kind} must be a list")
        out: list[dict[str, Any]] = []
        for i, item in enumerate(items):
            out.extend(_flatten(item, f"{where}, items[{i}]"))
        return out
    return [doc]


def load_yaml_documents(
    text: str, source: str = "<input>", limits: YamlLimits = DEFAULT_LIMITS
) -> list[dict[str, Any]]:
    """Every object in a YAML stream, with `v1 List`s (`kind: List`, `NodeList`, ...) replaced
    by their items and empty documents skipped; within `limits`. Raises YamlInputError naming
    `source`."""
    docs = _load_stream(text, source, limits)
    out: list[dict[str, Any]] = []
    for i, doc in enumerate(docs):
        out.extend(_flatten(doc, f"{source}: document {i + 1}"))
    return out

"""YAML in and out for the CLI: dumps that kubectl reads back unchanged, loads that flatten v1 Lists.

Why not plain `yaml.safe_dump`: PyYAML resolves scalars by YAML 1.1 rules, so it leaves strings
such as "08", "1e3" or "y" unquoted, and kubectl (YAML 1.2 numbers, YAML 1.1 booleans) reads
them back as an int, a float and a bool: an env value or a label turned into a number once
broke a deployment. `dump_yaml` quotes every string that some YAML 1.1 or 1.2 parser would
resolve to anything but a string, and never writes anchors/aliases (the builders share
sub-objects, e.g. one node-affinity expression in several terms, and `&id001` confuses people).
Pure: text in, data out; the CLI reads and writes the files.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

__all__ = ["YamlInputError", "dump_yaml", "dump_yaml_all", "load_yaml_documents", "needs_quotes"]

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
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _represent_str)


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


def load_yaml_documents(text: str, source: str = "<input>") -> list[dict[str, Any]]:
    """Every object in a YAML stream, with `v1 List`s (`kind: List`, `NodeList`, ...) replaced
    by their items and empty documents skipped. Raises YamlInputError naming `source`."""
    try:
        docs = list(yaml.load_all(text, Loader=_Loader))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        raise YamlInputError(f"{source}: not valid YAML{where}: {problem}") from None
    out: list[dict[str, Any]] = []
    for i, doc in enumerate(docs):
        out.extend(_flatten(doc, f"{source}: document {i + 1}"))
    return out

"""yamlio: dumps kubectl reads back as written (quoting, no aliases), loads that flatten Lists."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.manifest_helpers import EXAMPLES
from trainop.yamlio import (
    DEFAULT_LIMITS,
    YamlInputError,
    YamlLimits,
    dump_yaml,
    dump_yaml_all,
    load_yaml,
    load_yaml_documents,
    needs_quotes,
)

# The YAML 1.2 core schema's non-string plain scalars (spec section 10.3.2), written out here
# independently of the module under test: kubectl's parsers follow these for numbers.
CORE_12 = [
    re.compile(r"null|Null|NULL|~"),
    re.compile(r"true|True|TRUE|false|False|FALSE"),
    re.compile(r"[-+]?[0-9]+"),
    re.compile(r"0o[0-7]+"),
    re.compile(r"0x[0-9a-fA-F]+"),
    re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?"),
    re.compile(r"[-+]?\.(inf|Inf|INF)"),
    re.compile(r"\.nan|\.NaN|\.NAN"),
]
# YAML 1.1 booleans beyond 1.2's (go-yaml v2 reads these as bools).
BOOL_11 = [
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
    "on",
    "On",
    "ON",
    "off",
    "Off",
    "OFF",
]


def quoted(text: str, scalar: str) -> bool:
    return text.strip() in (f"k: '{scalar}'", f'k: "{scalar}"')


@pytest.mark.parametrize(
    "scalar",
    [
        "08",
        "09",
        "1",
        "007",
        "-3",
        "true",
        "False",
        "1e3",
        "1E-3",
        "-1.5e+10",
        ".5",
        "1.",
        "null",
        "~",
        "0x1f",
        "0o17",
        "0b101",
        "1_000",
        "190:20:30",
        ".inf",
        "-.Inf",
        ".NaN",
        "2024-01-31",
        "y",
        "N",
        "yes",
        "off",
        "On",
        "",
        " lead",
        "trail ",
        "12.4",
        "+1",
    ],
)
def test_ambiguous_strings_are_quoted(scalar: str) -> None:
    text = dump_yaml({"k": scalar})
    assert quoted(text, scalar), text
    assert yaml.safe_load(text) == {"k": scalar}


@pytest.mark.parametrize(
    "scalar",
    [
        "v1",
        "Pod",
        "nvidia.com/gpu",
        "a100-01",
        "418.87.01",
        "1.2.3",
        "=mlx5_0,mlx5_3",
        "9db36589339c201f",
        "trainop.dev/admission",
        "IPC_LOCK",
        "16Gi",
        "2Ti",
        "eth0",
    ],
)
def test_ordinary_strings_stay_plain(scalar: str) -> None:
    assert dump_yaml({"k": scalar}).strip() == f"k: {scalar}"


def test_keys_are_quoted_too() -> None:
    text = dump_yaml({"08": "a", "true": "b"})
    assert "'08': a" in text and "'true': b" in text
    assert yaml.safe_load(text) == {"08": "a", "true": "b"}


def test_non_strings_stay_typed() -> None:
    obj = {"i": 8, "f": 1.5, "b": True, "n": None, "l": [1, "1"]}
    assert yaml.safe_load(dump_yaml(obj)) == obj
    assert "i: 8\n" in dump_yaml(obj) and "b: true\n" in dump_yaml(obj)


@given(st.from_regex(re.compile(r"[-+]?[0-9]{1,6}|[0-9]{1,3}[eE][-+]?[0-9]{1,2}"), fullmatch=True))
def test_every_core_12_number_is_quoted(scalar: str) -> None:
    assert needs_quotes(scalar)


@pytest.mark.parametrize("scalar", BOOL_11)
def test_yaml_11_booleans_are_quoted(scalar: str) -> None:
    assert needs_quotes(scalar)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=30))
def test_any_string_round_trips_and_core_12_scalars_are_quoted(text: str) -> None:
    dumped = dump_yaml({"k": text})
    assert yaml.safe_load(dumped) == {"k": text}
    if any(p.fullmatch(text) for p in CORE_12):
        assert not dumped.startswith(f"k: {text}\n"), dumped


def test_no_anchors_or_aliases() -> None:
    shared = {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1"]}
    obj = {"terms": [{"matchExpressions": [shared]}, {"matchExpressions": [shared]}]}
    for text in (dump_yaml(obj), dump_yaml_all([obj, obj])):
        assert "&" not in text and "*" not in text
    assert yaml.safe_load(dump_yaml(obj)) == obj


def test_multiline_strings_use_literal_blocks() -> None:
    script = "import os\nprint(os.environ['RANK'])\n"
    text = dump_yaml({"args": [script]})
    assert "- |\n" in text
    assert yaml.safe_load(text) == {"args": [script]}


def test_long_values_are_not_folded() -> None:
    value = '{"cluster":{"worker":[' + ",".join(f'"w-{i}.svc:2222"' for i in range(40)) + "]}}"
    text = dump_yaml({"TF_CONFIG": value})
    assert len(text.strip().splitlines()) == 1
    assert yaml.safe_load(text) == {"TF_CONFIG": value}


def test_key_order_is_kept() -> None:
    text = dump_yaml({"apiVersion": "v1", "kind": "Pod", "metadata": {}, "spec": {}})
    assert [line.split(":")[0] for line in text.splitlines()] == [
        "apiVersion",
        "kind",
        "metadata",
        "spec",
    ]


def test_tuples_and_mappings_dump_as_plain_yaml() -> None:
    from types import MappingProxyType

    text = dump_yaml({"t": ("a", "1"), "m": MappingProxyType({"x": "08"})})
    assert yaml.safe_load(text) == {"t": ["a", "1"], "m": {"x": "08"}}


def test_dump_all_opens_every_document() -> None:
    text = dump_yaml_all([{"a": "1"}, {"b": "2"}])
    assert text.startswith("---\n") and text.count("---\n") == 2
    assert list(yaml.safe_load_all(text)) == [{"a": "1"}, {"b": "2"}]
    assert dump_yaml_all([]) == ""


def test_load_flattens_lists_and_skips_empty_documents() -> None:
    text = """
apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Node, metadata: {name: a}}
- {apiVersion: v1, kind: Node, metadata: {name: b}}
---
---
# only a comment
---
apiVersion: v1
kind: NodeList
items:
- {kind: Node, metadata: {name: c}}
---
kind: PodList
items: null
---
kind: Node
metadata: {name: d}
"""
    names = [d["metadata"]["name"] for d in load_yaml_documents(text)]
    assert names == ["a", "b", "c", "d"]


def test_load_keeps_a_kind_ending_in_list_without_items() -> None:
    doc = {"kind": "AllowList", "spec": {}}
    assert load_yaml_documents(yaml.safe_dump(doc)) == [doc]


def test_load_nested_list() -> None:
    text = "kind: List\nitems:\n- kind: List\n  items:\n  - {kind: Pod}\n"
    assert load_yaml_documents(text) == [{"kind": "Pod"}]


def test_load_keeps_timestamps_as_text() -> None:
    docs = load_yaml_documents("kind: Pod\nmetadata: {creationTimestamp: 2024-05-01T10:00:00Z}\n")
    assert docs[0]["metadata"]["creationTimestamp"] == "2024-05-01T10:00:00Z"


def test_load_empty_stream() -> None:
    assert load_yaml_documents("") == []
    assert load_yaml_documents("---\n# nothing\n") == []


def test_load_bad_yaml_names_source_and_line() -> None:
    with pytest.raises(YamlInputError, match=r"job\.yaml: not valid YAML \(line 3, column 10\)"):
        load_yaml_documents("kind: Pod\nmetadata:\n  name: a: b\n", source="job.yaml")


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("- a\n- b\n", "document 1"),
        ("kind: Pod\n---\njust text\n", "document 2"),
        ("kind: List\nitems: [1]\n", r"items\[0\]"),
        ("kind: List\nitems: {a: 1}\n", "items"),
    ],
)
def test_load_rejects_non_objects(text: str, where: str) -> None:
    with pytest.raises(YamlInputError, match=where):
        load_yaml_documents(text, source="f.yaml")


def test_round_trip_through_load() -> None:
    objs = [{"kind": "Pod", "metadata": {"labels": {"v": "08", "w": "yes"}}}, {"kind": "Service"}]
    assert load_yaml_documents(dump_yaml_all(objs)) == objs


# --- limits: size, depth, alias expansion ---------------------------------------------------


def alias_bomb(levels: int = 9, fan: int = 9, indent: str = "") -> str:
    """The "billion laughs": each level is `fan` aliases of the one before (fan**levels)."""
    lines = [f"{indent}l0: &a0 [{', '.join(['lol'] * fan)}]"]
    lines += [
        f"{indent}l{i}: &a{i} [{', '.join([f'*a{i - 1}'] * fan)}]" for i in range(1, levels + 1)
    ]
    return "\n".join(lines) + "\n"


def test_alias_bomb_is_refused_fast() -> None:
    text = "kind: Pod\nspec:\n" + alias_bomb(indent="  ")
    assert len(text) < 1024
    start = time.perf_counter()
    with pytest.raises(YamlInputError, match=r"^job\.yaml: document 1: aliases expand it by "):
        load_yaml_documents(text, source="job.yaml")
    assert time.perf_counter() - start < 1.0


def test_alias_bomb_in_a_later_document_names_it() -> None:
    text = "kind: Pod\n---\nkind: Pod\nspec:\n" + alias_bomb(indent="  ")
    with pytest.raises(YamlInputError, match=r"document 2: .*limit of 100,000"):
        load_yaml_documents(text)


@pytest.mark.parametrize(
    ("text", "limits", "message"),
    [
        pytest.param(
            "a: " + "x" * 100, YamlLimits(max_bytes=64), "over the limit of 64 bytes", id="size"
        ),
        pytest.param(
            "a: [[[[1]]]]\n",
            YamlLimits(max_depth=4),
            "nested more than 4 levels deep, over the limit",
            id="depth",
        ),
        pytest.param(
            "a: &x [[[1]]]\nb: [[[*x]]]\n",
            YamlLimits(max_depth=6),
            "nested more than 6 levels deep",
            id="depth-through-an-alias",
        ),
        pytest.param(
            alias_bomb(3, 3), YamlLimits(max_alias_nodes=20), "aliases expand it by", id="aliases"
        ),
        pytest.param(
            "a: &x [1, *x]\n", DEFAULT_LIMITS, "refers to its own ancestor", id="recursive-seq"
        ),
        pytest.param(
            "a: &x {b: *x}\n", DEFAULT_LIMITS, "refers to its own ancestor", id="recursive-map"
        ),
    ],
)
def test_limits_refuse_with_one_line_naming_source(
    text: str, limits: YamlLimits, message: str
) -> None:
    with pytest.raises(YamlInputError) as info:
        load_yaml_documents(text, source="in.yaml", limits=limits)
    assert str(info.value).startswith("in.yaml: ") and message in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            "a: &x {k: v}\nb: *x\nc: *x\n",
            {"a": {"k": "v"}, "b": {"k": "v"}, "c": {"k": "v"}},
            id="shared-map",
        ),
        pytest.param(
            "base: &b {x: 1}\nmerged: {<<: *b, y: 2}\n",
            {"base": {"x": 1}, "merged": {"x": 1, "y": 2}},
            id="merge-key",
        ),
        pytest.param(alias_bomb(3, 3), None, id="small-fan-out"),  # 3**3 = 27 lols
    ],
)
def test_honest_aliases_load(text: str, expected: Any) -> None:
    got = load_yaml(text)
    assert expected is None or got == expected


def test_load_yaml_is_one_document() -> None:
    assert load_yaml("") is None
    assert load_yaml("a: 1\n") == {"a": 1}
    with pytest.raises(YamlInputError, match="expected one YAML document, found 2"):
        load_yaml("a: 1\n---\nb: 2\n", source="f.yaml")


@pytest.mark.parametrize(
    "path", sorted(EXAMPLES.rglob("*.yaml")), ids=lambda p: str(p.relative_to(EXAMPLES))
)
def test_every_example_loads_within_default_limits(path: Path) -> None:
    assert isinstance(load_yaml_documents(path.read_text(), source=str(path)), list)

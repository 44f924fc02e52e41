"""The pod template's own node constraints: nodeSelector, required node affinity, tolerations.

The planner pins every pod to a node; the scheduler still enforces what the user's pod
template asks for. So a node the template forbids, or one whose taints the template does
not tolerate, must not be chosen, and a tainted node the template tolerates may be. This
module reads those constraints from the templates of a job's GPU roles and judges one
node with the scheduler's rules
(https://kubernetes.io/docs/concepts/scheduling-eviction/assign-pod-node/ and
https://kubernetes.io/docs/concepts/scheduling-eviction/taint-and-toleration/):

- nodeSelector: every key=value must be a label of the node;
- requiredDuringSchedulingIgnoredDuringExecution: the nodeSelectorTerms are ORed, the
  expressions of a term ANDed; operators In, NotIn, Exists, DoesNotExist, Gt, Lt (Gt/Lt
  compare the label as an integer; a label that is not one fails); matchFields supports
  metadata.name; an empty term list or term matches no node;
- tolerations: every NoSchedule/NoExecute taint of the node must be tolerated (a toleration
  with an empty key and operator Exists tolerates everything; an empty effect every effect).

With several GPU roles a node must satisfy the constraints of each of them (a conservative
choice: a pod of any role may land on any node of the gang). Pure; neighbours: the
planner's eligibility step (`trainop.eligibility`) applies `node_verdict` and
`tolerated_view`; `inventory.snapshot` decides the default tolerated taint keys.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from trainop.inventory import NodeInfo, Taint

_BLOCKING = frozenset({"NoSchedule", "NoExecute"})
_TAINT_PREFIX = "taint "


@dataclass(frozen=True)
class Constraints:
    """One role's constraints, as plain data (hashable for caching by the caller)."""

    role: str
    node_selector: tuple[tuple[str, str], ...] = ()
    terms: tuple[Mapping[str, Any], ...] | None = None  # None: no required node affinity
    tolerations: tuple[Mapping[str, Any], ...] = ()

    @property
    def empty(self) -> bool:
        return not self.node_selector and self.terms is None and not self.tolerations


def _spec(template: Mapping[str, Any] | None) -> Mapping[str, Any]:
    spec = (template or {}).get("spec") if isinstance(template, Mapping) else None
    return spec if isinstance(spec, Mapping) else {}


def from_template(role: str, template: Mapping[str, Any] | None) -> Constraints:
    """The constraints of one role's pod template (malformed parts are ignored here: the
    API server refuses such pods with its own message)."""
    spec = _spec(template)
    sel = spec.get("nodeSelector")
    selector = (
        tuple(sorted((str(k), str(v)) for k, v in sel.items())) if isinstance(sel, Mapping) else ()
    )
    req = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    terms = None
    if isinstance(req, Mapping):
        raw = req.get("nodeSelectorTerms")
        terms = tuple(t for t in raw if isinstance(t, Mapping)) if isinstance(raw, list) else ()
    tols = spec.get("tolerations")
    tolerations = tuple(t for t in tols if isinstance(t, Mapping)) if isinstance(tols, list) else ()
    return Constraints(role, selector, terms, tolerations)


def _int(v: str | None) -> int | None:
    try:
        return int(str(v).strip()) if v is not None else None
    except ValueError:
        return None


def _expr_ok(expr: Mapping[str, Any], value: str | None) -> bool:
    op = expr.get("operator")
    values = [str(v) for v in expr.get("values") or []]
    if op == "In":
        return value is not None and value in values
    if op == "NotIn":
        return value is None or value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt") and len(values) == 1:
        have, bound = _int(value), _int(values[0])
        if have is None or bound is None:
            return False
        return have > bound if op == "Gt" else have < bound
    return False


def _expr_text(expr: Mapping[str, Any]) -> str:
    vals = expr.get("values") or []
    tail = f" {','.join(str(v) for v in vals)}" if vals else ""
    return f"{expr.get('key')} {expr.get('operator')}{tail}"


def _term_failure(term: Mapping[str, Any], node: NodeInfo) -> str | None:
    """None when the term matches the node, else the first expression that fails."""
    exprs = [e for e in term.get("matchExpressions") or [] if isinstance(e, Mapping)]
    fields = [e for e in term.get("matchFields") or [] if isinstance(e, Mapping)]
    if not exprs and not fields:
        return "an empty term matches no node"
    for e in exprs:
        if not _expr_ok(e, node.labels.get(str(e.get("key")))):
            have = node.labels.get(str(e.get("key")))
            return f"{_expr_text(e)} (node has {'no such label' if have is None else repr(have)})"
    for e in fields:
        value = node.name if e.get("key") == "metadata.name" else None
        if not _expr_ok(e, value):
            return f"field {_expr_text(e)}"
    return None


def terms_met(terms: Sequence[Mapping[str, Any]], node: NodeInfo) -> tuple[Mapping[str, Any], ...]:
    """The first of `terms` (OR-ed nodeSelectorTerms) the node meets, alone; all of them
    when it meets none. A pod pinned to that node needs no other: its other terms are
    alternatives for other nodes, and on the wire they were most of a pod's bytes."""
    for term in terms:
        if _term_failure(term, node) is None:
            return (term,)
    return tuple(terms)


def tolerates(tolerations: Iterable[Mapping[str, Any]], taint: Taint) -> bool:
    """Kubernetes toleration matching for one taint."""
    for t in tolerations:
        effect = t.get("effect") or ""
        if effect and effect != taint.effect:
            continue
        op = t.get("operator") or "Equal"
        key = t.get("key") or ""
        if op == "Exists" and (not key or key == taint.key):
            return True
        if op == "Equal" and key == taint.key and str(t.get("value") or "") == taint.value:
            return True
    return False


def selector_verdict(constraints: Sequence[Constraints], node: NodeInfo) -> str | None:
    """None when every role's nodeSelector and required node affinity admit the node."""
    for con in constraints:
        who = f"the {con.role} template's"
        for key, want in con.node_selector:
            have = node.labels.get(key)
            if have != want:
                what = "no such label" if have is None else f"{key}={have}"
                return f"excluded by {who} nodeSelector {key}={want} (node has {what})"
        if con.terms is not None:
            fails = [_term_failure(t, node) for t in con.terms]
            if not fails:
                return f"excluded by {who} required node affinity (no nodeSelectorTerms)"
            if all(f is not None for f in fails):
                first = (
                    fails[0]
                    if len(fails) == 1
                    else "; ".join(f"term {i + 1}: {f}" for i, f in enumerate(fails))
                )
                return f"excluded by {who} required node affinity: {first}"
    return None


def tolerated_view(
    node: NodeInfo, constraints: Sequence[Constraints], default_keys: Iterable[str]
) -> NodeInfo:
    """The node as a pod with these templates sees it: a node unschedulable only because of
    taints becomes schedulable when every role tolerates its blocking taints; a schedulable
    node with a taint some role does not tolerate (and trainop does not add) becomes not."""
    reason = node.unschedulable_reason
    if reason is not None and not reason.startswith(_TAINT_PREFIX):
        return node  # not Ready or cordoned: no toleration helps
    defaults = frozenset(default_keys)
    for con in constraints:
        for taint in node.taints:
            if taint.effect not in _BLOCKING or taint.key in defaults:
                continue
            if not tolerates(con.tolerations, taint):
                why = f"taint {taint} (not tolerated by the {con.role} template)"
                if node.schedulable or reason != why:
                    return replace(node, schedulable=False, unschedulable_reason=why)
                return node
    if node.schedulable:
        return node
    return replace(node, schedulable=True, unschedulable_reason=None)

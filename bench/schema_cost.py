"""`make bench-schema`: what the TrainingJob schema costs the API server per write.

Issue 33 (part 2) asked whether a cheaper schema for writes that change only status is worth
having. This bench creates the same TrainingJob (examples/pytorch-ddp.yaml's) and patches
its status twice (an Admitted write, then a Running write, shaped like the operator's)
through three CRDs of the trainop.dev group on one local cluster:

  full                 the real TrainingJob CRD (crds/, generated from the models: the
                       structural schema and its CEL rules);
  status-undescribed   the same, but `status` is `x-kubernetes-preserve-unknown-fields`
                       (what a schema that skips status validation would save);
  no-schema            the whole object `x-kubernetes-preserve-unknown-fields` (the floor:
                       what any CRD write costs without validation).

Objects go in batches of 50, the three kinds in turn, so that drift on the machine falls
on all three alike. It reports the CPU seconds (user + system, /proc) of kube-apiserver
and etcd per create and per status patch. CPU seconds of a process are little moved by
other work on the machine; wall times are not used.

Writes bench/results/schema-cost.{json,md}. Numbers, never assertions: see README.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from bench.scale import RESULTS

from trainop.cluster.local import LocalCluster

ROOT = Path(__file__).resolve().parent.parent
GROUP, BATCH = "trainop.dev", 50
KINDS = {  # kind -> (plural, what its schema is)
    "TrainingJob": ("trainingjobs", "full"),
    "TrainingJobUndescribedStatus": ("trainingjobundescribedstatuses", "status-undescribed"),
    "TrainingJobNoSchema": ("trainingjobnoschemas", "no-schema"),
}
OPEN = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
CONDITION = {
    "type": "Admitted",
    "status": "True",
    "reason": "GangPlaced",
    "message": "2 pods on rack rack-1",
    "lastTransitionTime": "2026-11-27T00:00:00Z",
    "observedGeneration": 1,
}
ADMITTED = {
    "status": {
        "phase": "Admitted",
        "startTime": "2026-11-27T00:00:00Z",
        "gpus": 16,
        "framework": "pytorch 2.4",
        "image": "nvcr.io/nvidia/pytorch:24.07-py3",
        "observedGeneration": 1,
        "queue": "(built-in)",
        "placement": {"level": "rack", "domain": "rack-1", "nodes": ["n-000", "n-001"]},
        "replicaStatuses": {"Worker": {"pending": 2, "running": 0, "succeeded": 0, "failed": 0}},
        "conditions": [CONDITION],
    }
}
RUNNING = {
    "status": {
        "phase": "Running",
        "replicaStatuses": {"Worker": {"pending": 0, "running": 2, "succeeded": 0, "failed": 0}},
        "conditions": [
            CONDITION,
            {**CONDITION, "type": "Running", "reason": "AllPodsRunning", "message": "2 of 2"},
        ],
    }
}


def variants(crd: dict[str, Any]) -> list[dict[str, Any]]:
    """The real CRD and its two cut-down twins (other kinds of the same group)."""
    out = [crd]
    for kind, (plural, what) in KINDS.items():
        if what == "full":
            continue
        twin = copy.deepcopy(crd)
        twin["metadata"]["name"] = f"{plural}.{GROUP}"
        names = twin["spec"]["names"]
        names.update(kind=kind, plural=plural, singular=kind.lower(), listKind=f"{kind}List")
        names.pop("shortNames", None)
        names.pop("categories", None)
        for version in twin["spec"]["versions"]:
            schema = version["schema"]["openAPIV3Schema"]
            if what == "no-schema":
                version["schema"]["openAPIV3Schema"] = dict(OPEN)
            else:
                schema["properties"]["status"] = dict(OPEN)
            version.pop("selectableFields", None)
            columns = version.get("additionalPrinterColumns") or []
            version["additionalPrinterColumns"] = [
                c
                for c in columns
                if what != "no-schema" or c["jsonPath"] == ".metadata.creationTimestamp"
            ]
        out.append(twin)
    return out


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(objects: int, keep: bool) -> dict[str, Any]:
    from kubernetes import client, config  # the dev lock's client, as the tests use

    cluster = LocalCluster(name="bench-schema")
    cluster.up()
    config.load_kube_config(str(cluster.kubeconfig))
    ext, api = client.ApiextensionsV1Api(), client.CustomObjectsApi()
    crd = yaml.safe_load((ROOT / "crds" / "trainop.dev_trainingjobs.yaml").read_text())
    version = crd["spec"]["versions"][0]["name"]
    for definition in variants(crd):
        try:
            ext.create_custom_resource_definition(definition)
        except client.ApiException as exc:
            if exc.status != 409:
                raise
    time.sleep(5)  # the new kinds served
    docs = yaml.safe_load_all((ROOT / "examples" / "pytorch-ddp.yaml").read_text())
    body = next(d for d in docs if d and d.get("kind") == "TrainingJob")
    pids = cluster._pids()
    procs = {"kube-apiserver": pids["kube-apiserver"], "etcd": pids["etcd"]}
    spent = {
        what: {"create": dict.fromkeys(procs, 0.0), "status": dict.fromkeys(procs, 0.0)}
        for _, what in KINDS.values()
    }
    run_id = str(int(time.time()))[-6:]
    kinds = list(KINDS.items())
    for round_ in range(max(1, objects // BATCH)):
        for kind, (plural, what) in kinds[round_ % 3 :] + kinds[: round_ % 3]:
            names = [f"b{run_id}-{round_:03d}-{i:02d}" for i in range(BATCH)]
            before = {p: cpu_seconds(pid) for p, pid in procs.items()}
            for name in names:
                obj = copy.deepcopy(body)
                obj["kind"] = kind
                obj["metadata"] = {"name": name, "namespace": "default"}
                api.create_namespaced_custom_object(GROUP, version, "default", plural, obj)
            created = {p: cpu_seconds(pid) for p, pid in procs.items()}
            for name in names:
                for patch in (ADMITTED, RUNNING):
                    api.patch_namespaced_custom_object_status(
                        GROUP, version, "default", plural, name, patch
                    )
            patched = {p: cpu_seconds(pid) for p, pid in procs.items()}
            for p in procs:
                spent[what]["create"][p] += created[p] - before[p]
                spent[what]["status"][p] += patched[p] - created[p]
    count = max(1, objects // BATCH) * BATCH
    if not keep:
        cluster.down()
    return {
        "objects_per_kind": count,
        "body": "examples/pytorch-ddp.yaml's TrainingJob; an Admitted then a Running status patch",
        "ms_per_write": {
            what: {
                verb: {
                    p: round(1000 * s / (count * (2 if verb == "status" else 1)), 2)
                    for p, s in by.items()
                }
                for verb, by in per.items()
            }
            for what, per in spent.items()
        },
    }


def report(result: dict[str, Any]) -> str:
    rows = result["ms_per_write"]
    lines = [
        "# bench-schema: the TrainingJob schema's cost per write (API server, etcd CPU)",
        "",
        f"{result['objects_per_kind']} objects of each kind: {result['body']}.",
        "",
        "| schema | create: API server / etcd ms | status patch: API server / etcd ms "
        "| a job's 1 create + 2 status patches, API server ms |",
        "|---|---|---|---|",
    ]
    for what, per in rows.items():
        c, s = per["create"], per["status"]
        job = c["kube-apiserver"] + 2 * s["kube-apiserver"]
        lines.append(
            f"| {what} | {c['kube-apiserver']} / {c['etcd']} | {s['kube-apiserver']} / "
            f"{s['etcd']} | {job:.1f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--objects", type=int, default=600, help="per kind, in batches of 50")
    ap.add_argument("--keep", action="store_true", help="leave the cluster up")
    ap.add_argument("--out", default=str(RESULTS / "schema-cost"))
    args = ap.parse_args(argv)
    result = run(args.objects, args.keep)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    out.with_suffix(".md").write_text(report(result))
    print(report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

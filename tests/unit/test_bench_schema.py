"""bench-schema's CRD twins (bench.schema_cost.variants) and its report: pure parts."""

from __future__ import annotations

from pathlib import Path

import yaml
from bench.schema_cost import KINDS, report, variants

CRD = yaml.safe_load(
    (Path(__file__).resolve().parents[2] / "crds" / "trainop.dev_trainingjobs.yaml").read_text()
)


def test_the_twins_differ_from_the_real_crd_only_in_what_they_leave_undescribed() -> None:
    real, undescribed, open_ = variants(CRD)
    assert real is CRD
    by_kind = {v["spec"]["names"]["kind"]: v for v in (undescribed, open_)}
    assert set(by_kind) == {k for k, (_, what) in KINDS.items() if what != "full"}
    for kind, twin in by_kind.items():
        plural, what = KINDS[kind]
        assert twin["metadata"]["name"] == f"{plural}.trainop.dev"
        assert twin["spec"]["group"] == CRD["spec"]["group"]
        schema = twin["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        if what == "no-schema":
            assert schema == {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        else:
            real_schema = CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
            assert schema["properties"]["spec"] == real_schema["properties"]["spec"]
            assert schema["properties"]["status"]["x-kubernetes-preserve-unknown-fields"]
    assert "shortNames" in CRD["spec"]["names"]  # the real CRD is left as it is


def test_the_report_adds_a_jobs_create_and_two_status_patches() -> None:
    per = {
        "create": {"kube-apiserver": 6.0, "etcd": 1.0},
        "status": {"kube-apiserver": 8.0, "etcd": 2.0},
    }
    text = report({"objects_per_kind": 50, "body": "x", "ms_per_write": {"full": per}})
    assert "| full | 6.0 / 1.0 | 8.0 / 2.0 | 22.0 |" in text

"""Operator config files: defaults, every key, and errors that name the bad key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from trainop.api import constants as c
from trainop.config import ConfigError, load_operator_config, operator_config_from_data
from trainop.planner import OperatorConfig

TCP_SPEC = {"nodeSelector": {c.GFD_PRODUCT: "Tesla-T4"}, "fabric": "TCP", "socketIfname": "ens5"}


def write(tmp_path: Path, data: Any) -> Path:
    p = tmp_path / "config.yaml"
    p.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return p


def test_empty_file_gives_defaults(tmp_path: Path) -> None:
    cfg = load_operator_config(write(tmp_path, ""))
    default = OperatorConfig()
    assert cfg.topology_levels == default.topology_levels
    assert cfg.fabric_profiles == ()
    assert cfg.catalog is default.catalog  # the packaged catalog is shared, not re-read
    assert cfg.compat_affinity is True


def test_every_key(tmp_path: Path) -> None:
    data = {
        "topologyLevels": ["example.com/zone", c.LABEL_RACK, c.LABEL_HOSTNAME],
        "fabricProfiles": [
            {
                "apiVersion": c.API_VERSION,
                "kind": "FabricProfile",
                "metadata": {"name": "t4-tcp"},
                "spec": TCP_SPEC,
            },
            {
                "name": "h100-roce",
                "spec": {
                    "nodeSelector": {c.GFD_PRODUCT: "NVIDIA-H100-80GB-HBM3"},
                    "fabric": "RoCE",
                    "gidIndex": 3,
                },
            },
        ],
        "catalogOverrides": {
            "images": {"pytorch": {"repository": "registry.local/nvidia/pytorch"}}
        },
        "compatAffinity": False,
        "restartBackoffSeconds": 5,
        "restartBackoffMaxSeconds": 60.5,
        "imagePullGraceSeconds": 30,
        "topologyWaitSeconds": 120,
    }
    cfg = load_operator_config(write(tmp_path, data))
    assert cfg.topology_levels == ("example.com/zone", c.LABEL_RACK, c.LABEL_HOSTNAME)
    assert [p.name for p in cfg.fabric_profiles] == ["t4-tcp", "h100-roce"]
    assert cfg.fabric_profiles[0].spec.socket_ifname == "ens5"
    assert cfg.fabric_profiles[1].spec.gid_index == 3
    spec = cfg.catalog.image_spec("pytorch")
    assert spec is not None and spec.repository == "registry.local/nvidia/pytorch"
    assert cfg.compat_affinity is False
    assert (cfg.restart_backoff_seconds, cfg.restart_backoff_max_seconds) == (5.0, 60.5)
    assert cfg.image_pull_grace_seconds == 30.0
    assert cfg.topology_wait_seconds == 120.0
    assert cfg.cost.profiles == cfg.fabric_profiles  # the cost model prices these fabrics


@pytest.mark.parametrize(
    ("data", "key"),
    [
        pytest.param({"topologyLevel": []}, r"^topologyLevel: unknown key", id="typo"),
        pytest.param({"topologyLevels": []}, r"^topologyLevels: ", id="empty-levels"),
        pytest.param({"topologyLevels": "rack"}, r"^topologyLevels: ", id="levels-not-list"),
        pytest.param({"topologyLevels": ["a", ""]}, r"^topologyLevels\[1\]: ", id="empty-level"),
        pytest.param(
            {"topologyLevels": ["a", "a"]}, r"^topologyLevels: 'a' is listed twice", id="dup-level"
        ),
        pytest.param({"fabricProfiles": {"a": 1}}, r"^fabricProfiles: must be a list", id="map"),
        pytest.param({"fabricProfiles": ["x"]}, r"^fabricProfiles\[0\]: must be", id="scalar"),
        pytest.param(
            {"fabricProfiles": [{"name": "p", "spec": {"fabric": "Ethernet"}}]},
            r"^fabricProfiles\[0\]\.spec\.fabric: ",
            id="bad-fabric",
        ),
        pytest.param(
            {"fabricProfiles": [{"name": "p", "spec": {"fabric": "TCP", "hcas": ["mlx5_0"]}}]},
            r"^fabricProfiles\[0\]\.spec: .*hcas",
            id="tcp-with-hcas",
        ),
        pytest.param(
            {"fabricProfiles": [{"kind": "Node", "metadata": {"name": "p"}}]},
            r"^fabricProfiles\[0\]\.kind: expected FabricProfile",
            id="wrong-kind",
        ),
        pytest.param(
            {"fabricProfiles": [{"kind": "FabricProfile", "spec": TCP_SPEC}]},
            r"^fabricProfiles\[0\]\.metadata\.name: required",
            id="no-name",
        ),
        pytest.param(
            {
                "fabricProfiles": [
                    {
                        "apiVersion": "trainop.dev/v1",
                        "kind": "FabricProfile",
                        "metadata": {"name": "p"},
                        "spec": TCP_SPEC,
                    }
                ]
            },
            r"^fabricProfiles\[0\]\.apiVersion: ",
            id="wrong-version",
        ),
        pytest.param(
            {"fabricProfiles": [{"name": "p", "spec": TCP_SPEC}, {"name": "p", "spec": TCP_SPEC}]},
            r"^fabricProfiles\[1\]: a second profile named 'p'",
            id="dup-profile",
        ),
        pytest.param(
            {"catalogOverrides": ["x"]}, r"^catalogOverrides: must be a mapping", id="list"
        ),
        pytest.param(
            {"catalogOverrides": {"releases": {"24.05": {"cuda": "twelve"}}}},
            r"^catalogOverrides: ",
            id="bad-catalog",
        ),
        pytest.param(
            {"compatAffinity": "yes"}, r"^compatAffinity: must be true or false", id="bool"
        ),
        pytest.param({"restartBackoffSeconds": -1}, r"^restartBackoffSeconds: ", id="negative"),
        pytest.param({"restartBackoffMaxSeconds": True}, r"^restartBackoffMaxSeconds: ", id="b"),
        pytest.param({"topologyWaitSeconds": -5}, r"^topologyWaitSeconds: ", id="wait-negative"),
    ],
)
def test_errors_name_the_key(data: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        operator_config_from_data(data)


def test_not_a_mapping(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="expected an object"):
        load_operator_config(write(tmp_path, "- a\n- b\n"))


def test_bad_yaml_names_the_file(tmp_path: Path) -> None:
    p = write(tmp_path, "topologyLevels: [a\n")
    with pytest.raises(ConfigError, match=rf"{p.name}: not valid YAML \(line"):
        load_operator_config(p)


def test_several_documents(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="expected one YAML document, found 2"):
        load_operator_config(write(tmp_path, "compatAffinity: true\n---\ncompatAffinity: false\n"))


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_operator_config(tmp_path / "nope.yaml")


def test_fabric_profiles_null_means_none() -> None:
    assert operator_config_from_data({"fabricProfiles": None}).fabric_profiles == ()


def test_external_queue_kueue_leaves_the_pods_free_of_kueue_labels() -> None:
    """Under Kueue the job's Workload stands for the gang (docs/kueue.md): pods that Kueue's
    pod integration could take for pods of its own carry none of its labels."""
    import yaml

    from trainop.cluster.fleet import load_fleet, node_manifests
    from trainop.config import operator_config_from_data
    from trainop.inventory import build_snapshot
    from trainop.planner import Plan, plan_job

    config = operator_config_from_data({"externalQueue": "kueue"})
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    body = yaml.safe_load((root / "examples" / "pytorch-ddp.yaml").read_text())
    body["spec"]["queue"] = "team-a"
    plan = plan_job(body, build_snapshot(node_manifests(load_fleet())), config)
    assert isinstance(plan, Plan)
    for pod in plan.pods:
        meta = pod["metadata"]
        assert not [k for k in {**meta["labels"], **meta["annotations"]} if "kueue" in k]


def test_external_queue_rejects_unknown_values() -> None:
    import pytest

    from trainop.config import ConfigError, operator_config_from_data

    with pytest.raises(ConfigError, match="externalQueue: must be one of none, kueue"):
        operator_config_from_data({"externalQueue": "slurm"})

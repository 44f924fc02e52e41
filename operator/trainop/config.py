"""Operator config files (topology levels, FabricProfiles, catalog overrides) -> OperatorConfig.

The shape, every key optional:

    topologyLevels: [trainop.dev/block, trainop.dev/rack, kubernetes.io/hostname]
    fabricProfiles:              # FabricProfile resources as the cluster holds them,
      - apiVersion: trainop.dev/v1alpha1
        kind: FabricProfile
        metadata: {name: roce-h100}
        spec: {...}
      - {name: tcp-lab, spec: {...}}   # or the short form
    catalogOverrides: {...}      # deep-merged over the packaged catalog (load_catalog)
    compatAffinity: true
    restartBackoffSeconds: 10
    restartBackoffMaxSeconds: 300
    topologyWaitSeconds: 1800    # default bound of topology-aware waiting (docs/placement-cost.md)
    externalQueue: none          # none | kueue (see docs/queues.md)
    gangScheduling: trainop      # trainop | kubernetes (Workload/PodGroup, Kubernetes 1.37; docs/gang-kubernetes.md)
    dra: {enabled: false, gpuDeviceClass: gpu.nvidia.com, nicDeviceClass: rdma.nvidia.com,
          computeDomains: false}   # computeDomains: NVIDIA's DRA driver for GPUs is installed:
                                   # a ComputeDomain per gang inside one NVLink clique (docs/mnnvl.md)
    compatibilityModes: [Native, ForwardCompat, MinorVersionCompat]   # allowed, any order
    allowUnconfirmedReleases: true   # false: never choose a release with unconfirmed facts
    kubeflowTrainerStatus: true  # false: progress-wired pods get no KUBEFLOW_TRAINER_SERVER_* (docs/progress.md)
    progress: {url: https://trainop-progress.trainop-system.svc:8082/v1/progress, intervalSeconds: 10, caBundle: ""}
                                 # the report channel pods are wired to (`trainop run --progress-url` wins)
    migration: {enabled: false, gainMultiple: 2, defaultCostSeconds: 300, maxInFlight: 1, windowSeconds: 3600, consolidate: false}
                                 # move running gangs that checkpoint to a better placement (docs/placement-cost.md)

`trainop render --config` reads it, so a render uses the cluster's own settings. Pure apart
from reading the one file; every error is a ConfigError naming the bad key.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from trainop.api import constants as c
from trainop.api.base import all_errors
from trainop.api.fabricprofile import FabricProfile
from trainop.catalog import CatalogError, load_catalog
from trainop.catalog.compat import MODES
from trainop.dra import DraConfig
from trainop.planner import EXTERNAL_QUEUES, MigrationPolicy, OperatorConfig
from trainop.workload import GANG_SCHEDULING_MODES
from trainop.yamlio import YamlInputError, load_yaml_documents

__all__ = ["ConfigError", "load_operator_config", "operator_config_from_data"]

_KEYS = (
    "topologyLevels",
    "fabricProfiles",
    "catalogOverrides",
    "compatAffinity",
    "restartBackoffSeconds",
    "restartBackoffMaxSeconds",
    "imagePullGraceSeconds",
    "topologyWaitSeconds",
    "externalQueue",
    "gangScheduling",
    "dra",
    "compatibilityModes",
    "allowUnconfirmedReleases",
    "kubeflowTrainerStatus",
    "progress",
    "migration",
)


class ConfigError(ValueError):
    """The operator config is invalid; the message starts with the bad key."""


def _levels(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        raise ConfigError("topologyLevels: must be a non-empty list of node label keys")
    for i, level in enumerate(value):
        if not isinstance(level, str) or not level.strip():
            raise ConfigError(f"topologyLevels[{i}]: must be a non-empty label key, got {level!r}")
    if len(set(value)) != len(value):
        dup = next(x for x in value if value.count(x) > 1)
        raise ConfigError(f"topologyLevels: {dup!r} is listed twice")
    return tuple(value)


def _profile(value: Any, where: str) -> FabricProfile:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: must be a FabricProfile object, got {type(value).__name__}")
    if "metadata" in value or "kind" in value or "apiVersion" in value:
        kind, api = value.get("kind"), value.get("apiVersion")
        if kind != "FabricProfile":
            raise ConfigError(f"{where}.kind: expected FabricProfile, got {kind!r}")
        if api is not None and api != c.API_VERSION:
            raise ConfigError(f"{where}.apiVersion: expected {c.API_VERSION}, got {api!r}")
        meta = value.get("metadata") or {}
        name = meta.get("name") if isinstance(meta, Mapping) else None
        if not name:
            raise ConfigError(f"{where}.metadata.name: required")
        data: dict[str, Any] = {"name": name, "spec": value.get("spec")}
    else:
        data = dict(value)
    try:
        return FabricProfile.model_validate(data)
    except ValidationError as exc:
        path, msg = all_errors(exc, where)[0]
        raise ConfigError(f"{path}: {msg}") from None


def _profiles(value: Any) -> tuple[FabricProfile, ...]:
    if not isinstance(value, list):
        raise ConfigError("fabricProfiles: must be a list of FabricProfile objects")
    profiles = tuple(_profile(v, f"fabricProfiles[{i}]") for i, v in enumerate(value))
    names = [p.name for p in profiles]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise ConfigError(f"fabricProfiles[{i}]: a second profile named {name!r}")
    return profiles


def _progress(value: Any) -> dict[str, Any]:
    """`progress: {url, intervalSeconds, caBundle}`: the report channel pods are wired to,
    so `trainop render --config` wires them as the operator does (docs/progress.md)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError("progress: must be a mapping {url, intervalSeconds, caBundle}")
    unknown = sorted(str(k) for k in value if k not in ("url", "intervalSeconds", "caBundle"))
    if unknown:
        raise ConfigError(
            f"progress.{unknown[0]}: unknown key; known: url, intervalSeconds, caBundle"
        )
    out: dict[str, Any] = {}
    url = value.get("url", "")
    if not isinstance(url, str) or (url and not url.startswith(("https://", "http://"))):
        raise ConfigError(f"progress.url: must be an https:// (or http://) URL, got {url!r}")
    out["progress_url"] = url
    if value.get("intervalSeconds") is not None:
        interval = _number("progress.intervalSeconds", value["intervalSeconds"])
        if interval < 1:
            raise ConfigError(f"progress.intervalSeconds: must be >= 1, got {interval:g}")
        out["progress_interval"] = interval
    ca = value.get("caBundle", "")
    if not isinstance(ca, str) or (ca and "BEGIN CERTIFICATE" not in ca):
        raise ConfigError("progress.caBundle: must be PEM certificates (the operator's ca.crt)")
    out["progress_ca"] = ca
    return out


def _number(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ConfigError(f"{key}: must be a number of seconds >= 0, got {value!r}")
    return float(value)


def operator_config_from_data(data: Mapping[str, Any] | None) -> OperatorConfig:  # noqa: C901, PLR0912 - one branch per config key, each with its own error
    """An OperatorConfig from parsed config data; keys left out keep their defaults."""
    if data is None:
        return OperatorConfig()
    if not isinstance(data, Mapping):
        raise ConfigError(f"(top level): must be a mapping of {', '.join(_KEYS)}")
    unknown = sorted(str(k) for k in data if k not in _KEYS)
    if unknown:
        raise ConfigError(f"{unknown[0]}: unknown key; known keys: {', '.join(_KEYS)}")
    kwargs: dict[str, Any] = {}
    if "topologyLevels" in data:
        kwargs["topology_levels"] = _levels(data["topologyLevels"])
    if data.get("fabricProfiles") is not None:
        kwargs["fabric_profiles"] = _profiles(data["fabricProfiles"])
    overrides = data.get("catalogOverrides")
    if overrides is not None:
        if not isinstance(overrides, Mapping):
            raise ConfigError("catalogOverrides: must be a mapping shaped like the catalog file")
        try:
            kwargs["catalog"] = load_catalog(overrides=overrides)
        except CatalogError as exc:
            raise ConfigError(f"catalogOverrides: {exc}") from None
    if "compatAffinity" in data:
        if not isinstance(data["compatAffinity"], bool):
            raise ConfigError(
                f"compatAffinity: must be true or false, got {data['compatAffinity']!r}"
            )
        kwargs["compat_affinity"] = data["compatAffinity"]
    for key, attr in (
        ("restartBackoffSeconds", "restart_backoff_seconds"),
        ("restartBackoffMaxSeconds", "restart_backoff_max_seconds"),
        ("imagePullGraceSeconds", "image_pull_grace_seconds"),
        ("topologyWaitSeconds", "topology_wait_seconds"),
    ):
        if key in data:
            kwargs[attr] = _number(key, data[key])
    if "externalQueue" in data:
        if data["externalQueue"] not in EXTERNAL_QUEUES:
            raise ConfigError(
                f"externalQueue: must be one of {', '.join(EXTERNAL_QUEUES)}, got {data['externalQueue']!r}"
            )
        kwargs["external_queue"] = data["externalQueue"]
    if "gangScheduling" in data:
        kwargs["gang_scheduling"] = _gang_scheduling(data["gangScheduling"])
    if data.get("dra") is not None:
        kwargs["dra"] = _dra(data["dra"])
    if "compatibilityModes" in data:
        kwargs["compatibility_modes"] = _modes(data["compatibilityModes"])
    if "allowUnconfirmedReleases" in data:
        value = data["allowUnconfirmedReleases"]
        if not isinstance(value, bool):
            raise ConfigError(f"allowUnconfirmedReleases: must be true or false, got {value!r}")
        kwargs["allow_unconfirmed_releases"] = value
    if "kubeflowTrainerStatus" in data:
        value = data["kubeflowTrainerStatus"]
        if not isinstance(value, bool):
            raise ConfigError(f"kubeflowTrainerStatus: must be true or false, got {value!r}")
        kwargs["kubeflow_trainer_status"] = value
    if data.get("migration") is not None:
        kwargs["migration"] = _migration(data["migration"])
    if (
        kwargs.get("gang_scheduling") == "kubernetes"
        and kwargs.get("external_queue", "none") != "none"
    ):
        raise ConfigError(
            "gangScheduling: kubernetes is not combined with externalQueue: kueue; choose one "
            "(both would hold the gang: Kueue by its pod group, kube-scheduler by its PodGroup)"
        )
    return OperatorConfig(**kwargs, **_progress(data.get("progress")))


_MIGRATION_KEYS = {
    "gainMultiple": "gain_multiple",
    "defaultCostSeconds": "default_cost_seconds",
    "maxInFlight": "max_in_flight",
    "windowSeconds": "window_seconds",
}


def _migration(value: Any) -> MigrationPolicy:
    known = ", ".join(["enabled", "consolidate", *_MIGRATION_KEYS])
    if not isinstance(value, Mapping):
        raise ConfigError(f"migration: must be a mapping with {known}")
    unknown = sorted(set(value) - {"enabled", "consolidate", *_MIGRATION_KEYS})
    if unknown:
        raise ConfigError(f"migration.{unknown[0]}: unknown key; known keys: {known}")
    enabled = value.get("enabled", False)
    if not isinstance(enabled, bool):
        raise ConfigError(f"migration.enabled: must be true or false, got {enabled!r}")
    consolidate = value.get("consolidate", False)
    if not isinstance(consolidate, bool):
        raise ConfigError(f"migration.consolidate: must be true or false, got {consolidate!r}")
    kwargs: dict[str, Any] = {"enabled": enabled, "consolidate": consolidate}
    for key, attr in _MIGRATION_KEYS.items():
        if key in value:
            number = _number(f"migration.{key}", value[key])
            if key == "maxInFlight":
                if number != int(number) or number < 1:
                    raise ConfigError(
                        f"migration.maxInFlight: must be a whole number >= 1, got {value[key]!r}"
                    )
                number = int(number)
            kwargs[attr] = number
    if consolidate and kwargs.get("max_in_flight", 1) < 2:
        raise ConfigError(
            "migration.consolidate: moves two gangs at once at least; set migration.maxInFlight "
            "to 2 or more"
        )
    return MigrationPolicy(**kwargs)


def _gang_scheduling(value: Any) -> str:
    if value not in GANG_SCHEDULING_MODES:
        raise ConfigError(
            f"gangScheduling: must be one of {', '.join(GANG_SCHEDULING_MODES)}, got {value!r} "
            "(kubernetes needs Kubernetes >= 1.37 with the GenericWorkload feature gate and "
            "scheduling.k8s.io/v1beta1 on)"
        )
    return str(value)


def _modes(value: Any) -> frozenset[str]:
    known = ", ".join(MODES)
    if not isinstance(value, list) or not value:
        raise ConfigError(f"compatibilityModes: must be a non-empty list of {known}")
    for i, mode in enumerate(value):
        if mode not in MODES:
            raise ConfigError(f"compatibilityModes[{i}]: {mode!r} is not one of {known}")
    return frozenset(value)


_DRA_KEYS = "enabled, gpuDeviceClass, nicDeviceClass, computeDomains"


def _dra(value: Any) -> DraConfig:
    if not isinstance(value, Mapping):
        raise ConfigError(f"dra: must be a mapping with {_DRA_KEYS}")
    unknown = sorted(set(value) - {"enabled", "gpuDeviceClass", "nicDeviceClass", "computeDomains"})
    if unknown:
        raise ConfigError(f"dra.{unknown[0]}: unknown key; known keys: {_DRA_KEYS}")
    for key in ("enabled", "computeDomains"):
        if not isinstance(value.get(key, False), bool):
            raise ConfigError(f"dra.{key}: must be true or false, got {value[key]!r}")
    for key in ("gpuDeviceClass", "nicDeviceClass"):
        if key in value and not (isinstance(value[key], str) and value[key]):
            raise ConfigError(f"dra.{key}: must be a DeviceClass name")
    defaults = DraConfig()
    return DraConfig(
        enabled=value.get("enabled", False),
        gpu_device_class=value.get("gpuDeviceClass", defaults.gpu_device_class),
        nic_device_class=value.get("nicDeviceClass", defaults.nic_device_class),
        compute_domains=value.get("computeDomains", False),
    )


def load_operator_config(path: str | Path) -> OperatorConfig:
    """Read and check an operator config file (one YAML document; empty means defaults)."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read {p}: {exc.strerror or exc}") from None
    try:
        docs = load_yaml_documents(text, source=str(p))
    except YamlInputError as exc:
        raise ConfigError(str(exc)) from None
    if len(docs) > 1:
        raise ConfigError(f"{p}: expected one YAML document, found {len(docs)}")
    return operator_config_from_data(docs[0] if docs else None)

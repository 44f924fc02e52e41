"""Multi-node NVLink (issue 36, part 3): a GPU gang across the trays of one NVLink clique gets a
ComputeDomain owned by the job, IMEX channel claims and NCCL's MNNVL env when the operator
config says NVIDIA's DRA driver is installed (dra.computeDomains), and status.placement.imex
NotSetUp without it (trainop.dra, trainop.planner; the shell's create in trainop.kube.client; docs/mnnvl.md)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from tests.builders import job as make_job
from tests.unit.test_clique_topology import CONFIG, LEVELS, TWO_CLIQUES
from trainop.cli.render import placement_header
from trainop.config import ConfigError, operator_config_from_data
from trainop.dra import (
    CHANNEL_CLAIM,
    IMEX_COMPUTE_DOMAIN,
    IMEX_NOT_SET_UP,
    DraConfig,
    channel_template_name,
    compute_domain_name,
)
from trainop.inventory import build_snapshot
from trainop.kube.client import FaultInjector, KubeApi
from trainop.planner import Plan, plan_job

ON = DraConfig(compute_domains=True)
BOTH = DraConfig(enabled=True, compute_domains=True)


def plan(pods: int, gpus: int, topology: str, dra: DraConfig, ncclenv: Any = None) -> Plan:
    b = make_job("j", "pytorch", None, None, namespace="ns", workers=None)
    b = b.workers(pods, gpus, {}).placement(topology, "Required")
    if ncclenv:
        b = b.set("ncclEnv", ncclenv)
    cfg = replace(CONFIG, dra=dra, memo={})
    result = plan_job(b.build(), build_snapshot(list(TWO_CLIQUES), levels=LEVELS), cfg)
    assert isinstance(result, Plan), result
    return result


CASES = [
    # pods, GPUs per pod, topology, config, ComputeDomain numNodes (None: none), imex status
    pytest.param(2, 4, "clique", ON, 2, IMEX_COMPUTE_DOMAIN, id="two-trays-switch-on"),
    pytest.param(2, 4, "clique", DraConfig(), None, IMEX_NOT_SET_UP, id="two-trays-switch-off"),
    pytest.param(2, 4, "clique", BOTH, 2, IMEX_COMPUTE_DOMAIN, id="with-gpu-nic-claims-too"),
    pytest.param(2, 2, "node", ON, None, None, id="one-tray-needs-no-imex"),
    pytest.param(1, 4, "clique", ON, None, None, id="one-pod-needs-no-imex"),
    pytest.param(3, 4, "rack", ON, None, None, id="across-two-cliques-no-imex"),
]


@pytest.mark.parametrize(("pods", "gpus", "topology", "dra", "num_nodes", "imex"), CASES)
def test_compute_domain_per_gang(
    pods: int, gpus: int, topology: str, dra: DraConfig, num_nodes: Any, imex: Any
) -> None:
    p = plan(pods, gpus, topology, dra)
    assert p.placement_status().get("imex") == imex
    kinds = [o["kind"] for o in p.objects]
    if num_nodes is None:
        assert p.compute_domain is None and "ComputeDomain" not in kinds
        for pod in p.pods:
            assert CHANNEL_CLAIM not in str(pod["spec"].get("resourceClaims"))
        return
    cd = p.compute_domain
    assert cd is not None and kinds.count("ComputeDomain") == 1
    assert kinds.index("ComputeDomain") < kinds.index("Pod")  # created before the pods
    assert cd["apiVersion"] == "resource.nvidia.com/v1beta1"
    assert cd["metadata"]["name"] == compute_domain_name("j") == "j-imex"
    assert cd["metadata"]["ownerReferences"][0]["kind"] == "TrainingJob"
    assert cd["spec"] == {
        "numNodes": num_nodes,
        "channel": {
            "resourceClaimTemplate": {"name": channel_template_name("j")},
            "allocationMode": "Single",
        },
    }
    for pod in p.pods:
        claims = pod["spec"]["resourceClaims"]
        assert {"name": CHANNEL_CLAIM, "resourceClaimTemplateName": "j-imex-channel"} in claims
        main = pod["spec"]["containers"][0]
        assert {"name": CHANNEL_CLAIM} in main["resources"]["claims"]
        env = {e["name"]: e.get("value") for e in main["env"]}
        assert env["NCCL_MNNVL_ENABLE"] == "1" and env["NCCL_CUMEM_ENABLE"] == "1"


def test_the_jobs_own_nccl_env_wins() -> None:
    p = plan(2, 4, "clique", ON, ncclenv={"NCCL_MNNVL_ENABLE": "0"})
    for pod in p.pods:
        env = [e for e in pod["spec"]["containers"][0]["env"] if e["name"] == "NCCL_MNNVL_ENABLE"]
        assert env == [{"name": "NCCL_MNNVL_ENABLE", "value": "0"}]


@pytest.mark.parametrize(
    ("dra", "want"),
    [
        pytest.param({"computeDomains": True}, ON, id="on"),
        pytest.param({}, DraConfig(), id="default-off"),
        pytest.param({"computeDomains": "yes"}, "dra.computeDomains: must be", id="not-a-bool"),
    ],
)
def test_config_switch(dra: dict[str, Any], want: Any) -> None:
    if isinstance(want, str):
        with pytest.raises(ConfigError, match=want):
            operator_config_from_data({"dra": dra})
        return
    assert operator_config_from_data({"dra": dra}).dra == want


class _Custom:
    """CustomObjectsApi's create, recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def create_namespaced_custom_object(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        self.calls.append((*args[:4], kwargs))
        return {}


def test_the_shell_creates_the_compute_domain_as_a_custom_object() -> None:
    api = KubeApi.__new__(KubeApi)  # no cluster: only the custom-objects client is used
    api.custom = _Custom()  # type: ignore[assignment]
    api.faults = FaultInjector(None)
    cd = plan(2, 4, "clique", ON).compute_domain
    assert cd is not None and api.create(cd) is True
    [(group, version, ns, plural, opts)] = api.custom.calls  # type: ignore[attr-defined]
    assert (group, version, ns, plural) == (
        "resource.nvidia.com",
        "v1beta1",
        "ns",
        "computedomains",
    )
    assert opts == {"field_validation": "Strict"}


@pytest.mark.parametrize(
    ("dra", "line"),
    [
        pytest.param(ON, "# multi-node NVLink: ComputeDomain j-imex gives", id="on"),
        pytest.param(DraConfig(), "# multi-node NVLink: IMEX not set up", id="off"),
    ],
)
def test_render_says_it(dra: DraConfig, line: str) -> None:
    header = placement_header(plan(2, 4, "clique", dra))
    assert header.startswith("# placement: clique ") and line in header, header

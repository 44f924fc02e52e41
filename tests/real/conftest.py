"""The real-node tier: a local cluster with real nodes (kubelet + containerd + runc), the
images of `trainop images build`, and the operator; skipped, with the reason, where this
machine cannot run containers. Run by `make test-real`, never by `make test`."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import Kube, repo_root
from tests.real.helm_operator import OPERATOR_REPOSITORY, HelmOperator
from tests.real.registry import LocalRegistry
from tests.real.scenarios import Target
from trainop.cluster import images
from trainop.cluster.local import LocalCluster
from trainop.cluster.realnode import preflight

CLUSTER_NAME = os.environ.get("TRAINOP_TEST_CLUSTER", "trainop-it") + "-real"
IMAGES = ("pytorch-cpu", "mpi-cpu")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    asked = any(
        here == p or here in p.parents
        for p in (Path(str(a).split("::")[0]).resolve() for a in config.args)
    )
    # A plain `pytest` (all of tests/) must not start real nodes: only an explicit path does.
    reason = preflight() if asked else "not asked for: run `make test-real` (pytest tests/real)"
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.real)
            if reason:
                item.add_marker(pytest.mark.skip(reason=f"real-node tier: {reason}"))


def import_images(lc: LocalCluster, names: Iterable[str]) -> None:
    """Build (or take from the cache) each image and import it into every real node."""
    rn = lc.real_nodes()
    for name in names:
        archive = images.build_image(name, print)
        for node in rn.existing():
            started = time.monotonic()
            rn.import_image(node, archive, images.image_ref(name))
            print(f"imported {name} into {node.name} in {time.monotonic() - started:.0f} s")


HF = "hf-cpu"  # tests/real/test_6_trainers.py


class BackgroundImports:
    """The framework images (test_3_frameworks.py) and hf-cpu (test_6_trainers.py), imported
    in a thread from the moment the cluster is up: the 80-90 s of `ctr images import` (mostly
    disk) and hf-cpu's 30 s overlap the PyTorch, Helm and MPI tests that run first, instead
    of delaying the frameworks' first test and the trainers' module."""

    def __init__(self, lc: LocalCluster, names: tuple[str, ...]) -> None:
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(lc, names), daemon=True)
        self.thread.start()

    def _run(self, lc: LocalCluster, names: tuple[str, ...]) -> None:
        try:
            import_images(lc, names)
        except BaseException as exc:  # raised in the test that needs the images
            self.error = exc

    def wait(self) -> None:
        self.thread.join()
        if self.error is not None:
            raise self.error


@pytest.fixture(scope="session")
def real_cluster_and_imports(
    request: pytest.FixtureRequest,
) -> Iterator[tuple[LocalCluster, BackgroundImports | None]]:
    lc = LocalCluster(name=CLUSTER_NAME, bin_dir=os.environ.get("TRAINOP_BIN_DIR"))
    lc.up(str(Path(__file__).parent / "fleet-real.yaml"), real_nodes=1)
    background = None
    try:
        import_images(lc, IMAGES)
        wanted = {item.nodeid.split("::")[0] for item in request.session.items}
        later = (*images.FRAMEWORK_IMAGES,) if any("test_3_frameworks" in w for w in wanted) else ()
        if any("test_6_trainers" in w for w in wanted):
            later = (*later, HF)
        if later:
            background = BackgroundImports(lc, later)
        yield lc, background
    finally:
        if background is not None:
            background.thread.join()  # never tear the node down under an import
        if os.environ.get("TRAINOP_KEEP_CLUSTER") != "1":
            lc.down()


@pytest.fixture(scope="session")
def real_cluster(
    real_cluster_and_imports: tuple[LocalCluster, BackgroundImports | None],
) -> LocalCluster:
    return real_cluster_and_imports[0]


@pytest.fixture(scope="session")
def framework_images(
    real_cluster_and_imports: tuple[LocalCluster, BackgroundImports | None],
) -> dict[str, str]:
    """image name -> ref of the four framework images, once they are in the real nodes."""
    lc, background = real_cluster_and_imports
    if background is None:  # not started for this session's tests: import now
        import_images(lc, images.FRAMEWORK_IMAGES)
    else:
        background.wait()
    return {name: images.image_ref(name) for name in images.FRAMEWORK_IMAGES}


@pytest.fixture(scope="session")
def background_imports(
    real_cluster_and_imports: tuple[LocalCluster, BackgroundImports | None],
) -> None:
    """Until the background imports are done (none: nothing to wait for)."""
    background = real_cluster_and_imports[1]
    if background is not None:
        background.wait()


@pytest.fixture(scope="session")
def real_kube(real_cluster: LocalCluster) -> Kube:
    kube = Kube(real_cluster)
    kube.run("apply", "--server-side", "--force-conflicts", "-f", str(repo_root() / "crds"))
    # Polled, not `kubectl wait`: kubectl 1.36 fails at once ("status.conditions accessor
    # error") when it reads the CRD before the API server has written any condition.
    kube.wait_for("the TrainingJob CRD to be established", lambda: _established(kube))
    return kube


def _established(kube: Kube) -> bool:
    crd = kube.maybe_get("crd", "trainingjobs.trainop.dev") or {}
    conditions = (crd.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


@pytest.fixture(scope="session")
def local_registry(
    real_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalRegistry]:
    """A private plain-HTTP registry on loopback that the real nodes' containerd pulls from."""
    registry = LocalRegistry(tmp_path_factory.mktemp("registry"))
    registry.start()
    rn = real_cluster.real_nodes()
    for node in rn.existing():
        rn.trust_plain_http_registry(node, registry.address)
    try:
        yield registry
    finally:
        registry.stop()


@pytest.fixture(scope="session")
def real_operator(
    real_cluster: LocalCluster,
    real_kube: Kube,
    local_registry: LocalRegistry,
    tmp_path_factory: pytest.TempPathFactory,
) -> HelmOperator:
    """The operator as on a cluster: its image pushed to a registry, pulled by the kubelet."""
    # The archive itself, not the name: the image's key moves with every edit of trainop.
    ref = local_registry.push(images.build_image("operator", print), OPERATOR_REPOSITORY)
    op = HelmOperator(real_cluster, real_kube, tmp_path_factory.mktemp("helm"))
    op.install(ref, pull_policy="IfNotPresent", pull_secret=local_registry.docker_config_json())
    return op


@pytest.fixture(scope="session")
def target(real_kube: Kube, real_operator: HelmOperator) -> Target:
    return Target(real_kube, {name: images.image_ref(name) for name in IMAGES})


_ns_counter = iter(range(1, 10_000))


@pytest.fixture
def namespace(real_kube: Kube, request: pytest.FixtureRequest) -> Iterator[str]:
    name = f"real{next(_ns_counter)}-{request.node.name.lower().replace('_', '-')[:30]}"
    name = name.rstrip("-")
    real_kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    real_kube.wait_for(
        f"default ServiceAccount in {name}",
        lambda: real_kube.maybe_get("serviceaccount", "default", "-n", name),
    )
    yield name
    real_kube.run("delete", "namespace", name, "--wait=false", check=False)

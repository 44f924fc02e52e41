"""TensorFlow wiring: one TF_CONFIG per pod, with the same cluster spec in every pod.

TF_CONFIG = {"cluster": {"chief": [...], "worker": [...], "ps": [...]},
             "task": {"type": ..., "index": ...}}, serialised with sorted keys and no
spaces so every pod's cluster part is byte-identical. Task types follow TF's names
(chief, worker, ps, evaluator). The evaluator is not in the cluster spec: by TF's
convention (tf.estimator.train_and_evaluate, the Keras SidecarEvaluator) it is a side
job that reads checkpoints, so the training tasks never connect to or wait for it; it
still gets its own task. Chief and Worker are listed in rank order (placement's
topology order), so the task order TF's collectives see follows the topology and a
worker's task index is its position in that order, not its replica index; PS and
evaluator keep replica-index order. Unused task types are left out of the cluster.
Chief and Worker are ordered each on its own: a CPU-only Chief (ParameterServerStrategy's
coordinator) has no rank while GPU workers do, and each role is its own list anyway.
"""

from __future__ import annotations

import json

from trainop.frameworks.base import (
    FrameworkSpec,
    Member,
    MemberKey,
    Wiring,
    WiringInput,
    ordered_env,
    ports_for,
    ranked_members,
)

TF_CONFIG = "TF_CONFIG"
DEFAULT_PORT = 2222  # the port TensorFlow's own examples and Kubeflow's TFJob use

# spec role -> TF task type
TASK_TYPE = {"Chief": "chief", "Worker": "worker", "PS": "ps", "Evaluator": "evaluator"}


def _dump(obj: object) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def wire(inp: WiringInput) -> Wiring:
    lists: dict[str, tuple[Member, ...]] = {
        "Chief": ranked_members(inp, ("Chief",)),
        "Worker": ranked_members(inp, ("Worker",)),
        "PS": inp.of_role("PS"),
    }
    cluster = {
        TASK_TYPE[role]: [f"{m.host}:{inp.port}" for m in members]
        for role, members in lists.items()
        if members
    }
    if not ("chief" in cluster or "worker" in cluster):
        raise ValueError("tensorflow wiring needs a Chief or Worker member")
    lists["Evaluator"] = inp.of_role("Evaluator")
    env: dict[MemberKey, dict[str, str]] = {}
    for role, members in lists.items():
        for task_index, m in enumerate(members):
            task = {"type": TASK_TYPE[role], "index": task_index}
            env[m.key] = {TF_CONFIG: _dump({"cluster": cluster, "task": task})}
    port = (inp.port,)
    return Wiring(
        env=ordered_env(env),
        container_ports=ports_for(inp, {"Chief": port, "Worker": port, "PS": port}),
    )


SPEC = FrameworkSpec(
    name="tensorflow",
    roles=("Chief", "Worker", "PS", "Evaluator"),
    required=("Worker",),
    ranked=("Chief", "Worker"),
    default_port=DEFAULT_PORT,
    wire_fn=wire,
    max_replicas={"Chief": 1, "Evaluator": 1},
    purpose={
        "Chief": "the worker that also coordinates and writes checkpoints",
        "Worker": "the pods that train",
        "PS": "parameter servers holding variables for ParameterServerStrategy",
        "Evaluator": "a side job evaluating checkpoints, outside the cluster spec",
    },
)

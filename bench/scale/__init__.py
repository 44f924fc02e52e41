"""`make bench-scale` (`python -m bench.scale`): the operator against bare pods on a large fake
fleet, in one run. One module per scenario over a shared harness.

Scenarios (each on the local control plane: real kube-apiserver, kube-scheduler, etcd and
KWOK fake nodes; the real operator process with its own metrics):
  burst  A generated fleet (default 1,000 8-GPU H100 nodes, racks of 25) and N TrainingJobs
         of mixed sizes (1-16 x 8 GPUs plus partial-node jobs of 1, 2 or 4 GPUs) created at
         once. Measured: creation -> all pods Running per job (p50, p99) and for the whole
         burst, admissions per second, API writes per job (trainop's client counts its own;
         kopf's finalizer patches and Events are read from the apiserver's request counters),
         operator CPU seconds and peak RSS. Baseline: the same gangs as bare pods, created
         gated by the same client, each gang ungated as soon as its pods exist, and placed
         by kube-scheduler. The ratio operator/baseline is reported. Further columns: the
         same jobs with trainop behind the real Kueue (`externalQueue: kueue`, one Workload
         per job; docs/kueue.md; `--skip-kueue` leaves it out) and as Kubeflow PyTorchJobs.
  gang modes  The same burst on a Kubernetes 1.37 cluster under `gangScheduling: trainop` and
         `gangScheduling: kubernetes` (Workload/PodGroup, kube-scheduler places the gang),
         with placement quality (`gang_modes`; `--skip-gang-modes` leaves it out).
  deep   A fleet filled by running gangs, then M jobs queued behind it; the operator's CPU
         while nothing changes; then a quarter of the running gangs finish and the admission
         latency (capacity freed -> job Admitted, p50/p99) of the jobs that then fit.
  trace  openb's GPU pods replayed on a fleet of its nodes, bare and as TrainingJobs (`trace`).
The burst also records where the control plane's time goes, per job, bare against trainop
(`controlplane`: API server requests by resource and verb, watch events, etcd writes, CPU
per process).

Modules: `common` (settings), `workload` (gangs, fleet, bodies), `client`, `measure` (pod
watch, per-gang times, CPU), `harness` (the settled bench cluster, the operator process),
one per scenario (`burst`, `gang_modes`, `deep`, `trace`), `controlplane`, `report`
(scale.{json,md,png}, controlplane.{json,md}) and `__main__` (the command line).
Writes bench/results/. Numbers, never assertions. tests/integration/test_scale_smoke.py
runs a tiny burst against the integration tier's cluster.
"""

from __future__ import annotations

from bench.scale.burst import audit_gangs, burst, run_bare, run_killed, run_kueue, run_operator
from bench.scale.client import Client
from bench.scale.common import GPU, H100, REPO, RESULTS, SEED
from bench.scale.deep import deep, run_deep
from bench.scale.harness import _wait_untainted, cluster_with, start_operator
from bench.scale.measure import (
    BurstResult,
    ProcStat,
    RunningWatch,
    control_plane_cpu,
    pct,
    summarize,
    wait_running,
)
from bench.scale.trace import trace
from bench.scale.workload import Gang, bare_pod, fleet_file, mixed_gangs, training_job

__all__ = [
    "GPU",
    "H100",
    "REPO",
    "RESULTS",
    "SEED",
    "BurstResult",
    "Client",
    "Gang",
    "ProcStat",
    "RunningWatch",
    "_wait_untainted",
    "audit_gangs",
    "bare_pod",
    "burst",
    "cluster_with",
    "control_plane_cpu",
    "deep",
    "fleet_file",
    "mixed_gangs",
    "pct",
    "run_bare",
    "run_deep",
    "run_killed",
    "run_kueue",
    "run_operator",
    "start_operator",
    "summarize",
    "trace",
    "training_job",
    "wait_running",
]

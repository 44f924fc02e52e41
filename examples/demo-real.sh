#!/usr/bin/env bash
# The real-node demo: a local cluster with one real node (kubelet + containerd + runc), the
# pytorch-cpu image built from Debian packages, the operator, and a PyTorch DDP job that
# trains for real; ends with the workers' log. Needs root. `make demo-real-down` stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
TRAINOP=${TRAINOP:-.venv/bin/trainop}
NAME=${TRAINOP_DEMO_CLUSTER:-trainop-real}
STATE=${XDG_STATE_HOME:-$HOME/.local/state}/trainop
mkdir -p "$STATE"
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

say "local control plane + one real node (trainop cluster up --real-nodes 1)"
$TRAINOP cluster up --name "$NAME" --real-nodes 1 --fleet tests/real/fleet-real.yaml
eval "$($TRAINOP cluster env --name "$NAME")"
kubectl get nodes -o wide -L nvidia.com/gpu.product,trainop.dev/real-node | cut -c1-160

say "images (trainop images build: Debian packages -> OCI, imported into the node)"
$TRAINOP images build --name "$NAME" pause pytorch-cpu

say "CRDs and the operator (trainop run, log: $STATE/operator-real.log)"
kubectl apply --server-side --force-conflicts -f crds/ >/dev/null
kubectl wait --for condition=established crd/trainingjobs.trainop.dev --timeout=30s >/dev/null
if [ -f "$STATE/operator-real.pid" ] && kill -0 "$(cat "$STATE/operator-real.pid")" 2>/dev/null; then
  echo "already running (pid $(cat "$STATE/operator-real.pid"))"
else
  nohup $TRAINOP run --restart-backoff-seconds 2 --metrics-port 18090 --health-port 18091 \
    >"$STATE/operator-real.log" 2>&1 &
  echo $! >"$STATE/operator-real.pid"
  for _ in $(seq 1 60); do curl -sf http://127.0.0.1:18091/healthz >/dev/null && break; sleep 0.5; done
  echo "running (pid $(cat "$STATE/operator-real.pid"))"
fi

say "a PyTorch DDP job: 2 workers, gloo, on the real node (examples/real/pytorch-ddp-cpu.yaml)"
kubectl delete trainingjob ddp-cpu --ignore-not-found --wait >/dev/null
kubectl apply -f examples/real/pytorch-ddp-cpu.yaml
for _ in $(seq 1 300); do
  phase=$(kubectl get tj ddp-cpu -o jsonpath='{.status.phase}')
  case "$phase" in Succeeded|Failed) break ;; esac
  sleep 1
done
kubectl get tj ddp-cpu
kubectl get pods -l trainop.dev/job-name=ddp-cpu -o wide | cut -c1-120

say "the workers' log (kubectl logs ddp-cpu-worker-0)"
kubectl logs ddp-cpu-worker-0
echo
echo "stop everything: make demo-real-down"

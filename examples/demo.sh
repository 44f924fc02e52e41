#!/usr/bin/env bash
# The README's demo: local cluster with a fake GPU fleet, the operator, the examples, and
# where everything landed. Safe to run again. `make demo-down` stops it all.
set -euo pipefail
cd "$(dirname "$0")/.."
TRAINOP=${TRAINOP:-.venv/bin/trainop}
STATE=${XDG_STATE_HOME:-$HOME/.local/state}/trainop
mkdir -p "$STATE"
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

say "local control plane + fake GPU fleet (trainop cluster up)"
$TRAINOP cluster up
eval "$($TRAINOP cluster env)"
kubectl get nodes -L nvidia.com/gpu.product,trainop.dev/rack,nvidia.com/cuda.driver-version.full

say "CRDs"
kubectl apply --server-side --force-conflicts -f crds/ >/dev/null
kubectl wait --for condition=established crd/trainingjobs.trainop.dev --timeout=30s >/dev/null

say "operator (trainop run, log: $STATE/operator.log)"
if [ -f "$STATE/operator.pid" ] && kill -0 "$(cat "$STATE/operator.pid")" 2>/dev/null; then
  echo "already running (pid $(cat "$STATE/operator.pid"))"
else
  nohup $TRAINOP run --restart-backoff-seconds 2 --metrics-port 18080 --health-port 18081 \
    >"$STATE/operator.log" 2>&1 &
  echo $! >"$STATE/operator.pid"
  for _ in $(seq 1 60); do curl -sf http://127.0.0.1:18081/healthz >/dev/null && break; sleep 0.5; done
  echo "running (pid $(cat "$STATE/operator.pid")); metrics on http://127.0.0.1:18080/metrics"
fi

say "apply the examples"
for ns in team-nlp team-vision team-speech team-recsys; do
  kubectl create namespace "$ns" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
done
kubectl apply -f examples/queues.yaml
for f in examples/*.yaml; do
  grep -q '^kind: TrainingJob' "$f" && kubectl apply -f "$f"
done

say "wait for the gangs to run"
for _ in $(seq 1 60); do
  pending=$(kubectl get trainingjobs -A -o jsonpath='{range .items[*]}{.status.phase}{"\n"}{end}' \
            | grep -cvE '^(Running|Succeeded|Failed|Invalid)$' || true)
  [ "$pending" = "0" ] && break
  sleep 1
done
kubectl get trainingjobs -A
say "tenant queues (quota / used / borrowed per product group)"
kubectl get trainingqueues
kubectl get trainingqueues -o custom-columns='QUEUE:.metadata.name,USAGE:.status.usage'
say "where the pods landed (rank order follows the topology)"
kubectl get pods -A -l trainop.dev/job-name -o wide \
  -L trainop.dev/rank --sort-by=.metadata.name | cut -c1-150
say "placement recorded in status"
kubectl get trainingjobs -A -o custom-columns='JOB:.metadata.name,IMAGE:.status.image,LEVEL:.status.placement.level,DOMAIN:.status.placement.domain,NODES:.status.placement.nodes'

say "PyTorch job finishes: make its workers exit 0 (a KWOK stage honours trainop.dev/fake-exit-code)"
kubectl annotate pods -n team-nlp -l trainop.dev/job-name=bert trainop.dev/fake-exit-code=0 --overwrite >/dev/null
for _ in $(seq 1 30); do
  [ "$(kubectl get tj bert -n team-nlp -o jsonpath='{.status.phase}')" = "Succeeded" ] && break
  sleep 1
done
kubectl get tj bert -n team-nlp
kubectl get events -n team-nlp --field-selector involvedObject.name=bert --sort-by=.lastTimestamp | tail -5

cat <<MSG

The cluster and operator keep running. Try:
  eval "\$($TRAINOP cluster env)"; kubectl get tj -A
  $TRAINOP render examples/pytorch-ddp.yaml --nodes examples/fleet-nodes.yaml
Stop everything with: make demo-down
MSG

"""TensorFlow MultiWorkerMirroredStrategy on CPU, wired by trainop's TF_CONFIG only.

Run in each Chief and Worker pod (the tensorflow-cpu image); TF reads TF_CONFIG (the
cluster spec trainop renders, with this pod's task) on its own. Every replica fits
y = 3x + 2 with a linear model on its own shard of a fixed dataset; its gradients are
summed across the workers by the strategy's collective all-reduce (gRPC/ring on CPU).

Two checks, both printed by the chief (task chief 0) as the line the tests read:
`tf: replicas=<n> steps=<k> allreduce_err=<e> loss <first> -> <last> OK`
- allreduce_err: every step, every replica compares the all-reduced gradient with the sum
  of all replicas' gradients it computes itself (every replica sees the full dataset and
  the same weights); the sum of the differences over replicas, at its largest over steps, must be ~0;
- loss: the mean loss over all shards must fall below a tenth of its first value.

Options (env): TRAINOP_STEPS (default 30).
Strategy: https://www.tensorflow.org/api_docs/python/tf/distribute/MultiWorkerMirroredStrategy
"""

import json
import os
import sys

import tensorflow as tf


def main() -> int:
    task = json.loads(os.environ["TF_CONFIG"])["task"]
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    n = strategy.num_replicas_in_sync
    steps = int(os.environ.get("TRAINOP_STEPS", "30"))
    x = tf.reshape(tf.linspace(-1.0, 1.0, 240), (-1, 1))
    y = 3.0 * x + 2.0
    with strategy.scope():
        # Every replica applies the same all-reduced update: one copy's write is enough.
        first_replica = tf.VariableAggregation.ONLY_FIRST_REPLICA
        w = tf.Variable(0.0, aggregation=first_replica)
        b = tf.Variable(0.0, aggregation=first_replica)

    def grads(shard: int) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        xs, ys = x[shard::n], y[shard::n]
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((w * xs + b - ys) ** 2)
        gw, gb = tape.gradient(loss, [w, b])
        return loss, gw, gb

    @tf.function
    def step() -> tuple[tf.Tensor, tf.Tensor]:
        def replica() -> tuple[tf.Tensor, tf.Tensor]:
            ctx = tf.distribute.get_replica_context()
            me = ctx.replica_id_in_sync_group
            loss, gw, gb = grads(me)
            sum_gw, sum_gb, sum_loss = ctx.all_reduce("sum", [gw, gb, loss])
            # The same sum, computed here from every shard: what the all-reduce must give.
            want = [grads(r) for r in range(n)]
            err = tf.maximum(
                tf.abs(sum_gw - tf.add_n([g[1] for g in want])),
                tf.abs(sum_gb - tf.add_n([g[2] for g in want])),
            )
            w.assign_sub(0.5 * sum_gw / n)
            b.assign_sub(0.5 * sum_gb / n)
            return sum_loss / n, err

        loss, err = strategy.run(replica)
        return (
            strategy.reduce("mean", loss, axis=None),
            strategy.reduce("sum", err, axis=None),  # >= every replica's error
        )

    first = last = worst = 0.0
    for k in range(steps):
        loss, err = step()
        last, worst = float(loss), max(worst, float(err))
        first = first or last
        if k % 10 == 0:
            print(f"{task['type']} {task['index']} step {k} loss {last:.6f}", flush=True)
    ok = worst < 1e-4 and last < first / 10
    if task["type"] == "chief":
        verdict = "OK" if ok else "WRONG"
        print(
            f"tf: replicas={n} steps={steps} allreduce_err={worst:.3g} "
            f"loss {first:.4g} -> {last:.4g} {verdict}",
            flush=True,
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

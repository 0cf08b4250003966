"""A Keras ``fit`` step's time: autodist ``model.fit`` vs the same model under ``ad.function`` vs MWMS ``fit``.

    python benchmarks/keras_fit.py [--rounds 3] [--epochs 3] [--batch 128] [--json out.json]

One model (an MLP, 784 -> 256 -> 256 -> 10, Adam, sparse categorical cross-entropy,
``accuracy``) on 4096 synthetic rows, global batch ``--batch``, two nodes on this
machine (``resource_specs/loopback_two_nodes.yml``; MWMS gets two workers on
127.0.0.1 and 127.0.0.2). Three configurations, run one after the other in each
round (interleaved, so that drifts of the shared machine hit all three alike), each
a fresh set of processes with the same thread settings (``TF_NUM_INTRAOP_THREADS=1``,
``TF_NUM_INTEROP_THREADS=2`` in every process):

    fit        autodist, model compiled in ad.scope(), model.fit(x, y, batch_size)  (AllReduce)
    function   autodist, the same train step written with ad.function (AllReduce), no metrics
    mwms       tf.distribute.MultiWorkerMirroredStrategy: the same step with strategy.run (Keras 3's
               model.fit fails under MWMS on TF 2.21 with "Attempt to convert a value (PerReplica...",
               keras-team/keras#20585), so MWMS's best Keras 3 path is this custom loop

A step's time is measured on the chief (worker 0) from ``on_train_batch_begin`` to
``on_train_batch_end`` for ``fit`` (so it includes autodist's metric synchronization
and the logs), around the call for ``function`` and ``mwms``; the first epoch is warm-up. Printed:
per configuration the median and p90 over rounds of each round's median, in ms.
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPEC = os.path.join(ROOT, "resource_specs", "loopback_two_nodes.yml")
ROWS, FEATURES, CLASSES = 4096, 784, 10
THREADS = {"TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "2", "TF_CPP_MIN_LOG_LEVEL": "2"}
CONFIGS = ("fit", "function", "mwms")


def _data():
    import numpy as np
    rng = np.random.RandomState(0)
    return rng.rand(ROWS, FEATURES).astype(np.float32), rng.randint(0, CLASSES, ROWS).astype(np.int32)


def _model(keras):
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(256, activation="relu"),
                             keras.layers.Dense(256, activation="relu"), keras.layers.Dense(CLASSES)])


def _loss(keras):
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def _timer(keras, times):
    class StepTimer(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            self.start = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            times.append(time.perf_counter() - self.start)
    return StepTimer()


def _report(times, steps_per_epoch):
    measured = sorted(times[steps_per_epoch:])   # the first epoch warms up
    print("STEP_MS {:.3f}".format(1000 * measured[len(measured) // 2]), flush=True)


def role_fit(args):
    import keras
    import tensorflow as tf
    from autodist import AutoDist
    from autodist.strategies import AllReduce
    x, y = _data()
    ad = AutoDist(SPEC, AllReduce())
    with tf.Graph().as_default(), ad.scope():
        model = _model(keras)
        model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=_loss(keras), metrics=["accuracy"])
    times = []
    model.fit(x, y, batch_size=args.batch, epochs=args.epochs, verbose=0, callbacks=[_timer(keras, times)])
    if ad.is_chief:
        _report(times, -(-ROWS // args.batch))


def role_function(args):
    import keras
    import tensorflow as tf
    from autodist import AutoDist
    from autodist.strategies import AllReduce
    x, y = _data()
    ad = AutoDist(SPEC, AllReduce())
    with tf.Graph().as_default(), ad.scope():
        model = _model(keras)
        optimizer = keras.optimizers.Adam(1e-3)
        loss_fn = _loss(keras)

    @ad.function
    def train_step(xb, yb):
        with tf.GradientTape() as tape:
            loss = loss_fn(yb, model(xb, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    part = args.batch // ad.num_workers
    times = []
    for _ in range(args.epochs):
        for start in range(0, ROWS - args.batch + 1, args.batch):
            rows = slice(start + ad.worker_index * part, start + (ad.worker_index + 1) * part)
            began = time.perf_counter()
            train_step(x[rows], y[rows])
            times.append(time.perf_counter() - began)
    if ad.is_chief:
        _report(times, ROWS // args.batch)


def role_mwms(args):
    """MWMS with a ``strategy.run`` step: Keras 3's ``fit`` does not run under MWMS (module docstring)."""
    os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": args.cluster.split(",")},
                                          "task": {"type": "worker", "index": args.task}})
    import keras
    import tensorflow as tf
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    x, y = _data()
    with strategy.scope():
        model = _model(keras)
        optimizer = keras.optimizers.Adam(1e-3)
        loss_fn = _loss(keras)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(args.batch, drop_remainder=True)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    batches = strategy.experimental_distribute_dataset(dataset.with_options(options))
    replicas = strategy.num_replicas_in_sync

    def replica_step(xb, yb):   # Keras' optimizer sums the replicas' gradients: scale the loss
        with tf.GradientTape() as tape:
            loss = loss_fn(yb, model(xb, training=True)) / replicas
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    step = tf.function(lambda xb, yb: strategy.run(replica_step, args=(xb, yb)))
    times = []
    for _ in range(args.epochs):
        for xb, yb in batches:
            began = time.perf_counter()
            strategy.reduce("SUM", step(xb, yb), axis=None).numpy()
            times.append(time.perf_counter() - began)
    if args.task == 0:
        _report(times, ROWS // args.batch)


def _free_port(host):
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _run(config, args):
    """One configuration's processes; the chief's median step time in ms."""
    env = dict(os.environ, **THREADS, PYTHONPATH=os.pathsep.join([ROOT] + sys.path[1:]))
    base = [sys.executable, os.path.abspath(__file__), "--epochs", str(args.epochs), "--batch", str(args.batch)]
    if config == "mwms":
        cluster = "127.0.0.1:{},127.0.0.2:{}".format(_free_port("127.0.0.1"), _free_port("127.0.0.2"))
        procs = [subprocess.Popen(base + ["--role", "mwms", "--cluster", cluster, "--task", str(task)], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for task in (0, 1)]
    else:
        procs = [subprocess.Popen(base + ["--role", config], env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)]
    outputs = [proc.communicate(timeout=args.timeout)[0] for proc in procs]
    for proc, output in zip(procs, outputs):
        if proc.returncode != 0:
            raise SystemExit("{} failed (exit {}):\n{}".format(config, proc.returncode, output[-3000:]))
    found = [float(line.split()[1]) for line in outputs[0].splitlines() if line.startswith("STEP_MS")]
    if not found:
        raise SystemExit("{} printed no STEP_MS line:\n{}".format(config, outputs[0][-3000:]))
    return found[0]


def harness(args):
    results = {config: [] for config in CONFIGS}
    for round_index in range(args.rounds):
        for config in CONFIGS:
            results[config].append(_run(config, args))
            print("round {} {:8s} {:.2f} ms/step".format(round_index + 1, config, results[config][-1]), flush=True)
    print("\nconfig     median ms  p90 ms   (global batch {}, {} rounds)".format(args.batch, args.rounds))
    for config, values in results.items():
        ordered = sorted(values)
        p90 = ordered[min(len(ordered) - 1, int(round(0.9 * (len(ordered) - 1))))]
        print("{:9s} {:9.2f} {:7.2f}".format(config, statistics.median(values), p90))
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"batch": args.batch, "rounds": args.rounds, "step_ms": results}, out, indent=1)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--json")
    parser.add_argument("--role", choices=CONFIGS)
    parser.add_argument("--cluster")
    parser.add_argument("--task", type=int, default=0)
    args = parser.parse_args(argv)
    if args.role is None:
        harness(args)
    else:
        {"fit": role_fit, "function": role_function, "mwms": role_mwms}[args.role](args)


if __name__ == "__main__":
    main()

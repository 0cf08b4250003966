"""The processes of one step-time configuration (``python step_time.py --role ROLE ...``).

    autodist   the user's script under ``autodist.AutoDist(spec, Builder())``: the
               harness starts the chief; autodist starts the other node (its
               server and the same script, same argv) itself
    hand_ps    a hand-written synchronous TF1 parameter server: ``--task ps`` serves
               the variables, ``--task k`` is worker k (see ``hand_ps_train_op``)
    mwms       one worker of ``tf.distribute.MultiWorkerMirroredStrategy`` with RING
               collectives and ``--pack`` bytes per pack (0: one pack), a Keras 3 model
    single     one process, the global batch, no distribution (the reference)

Every training process feeds one fixed synthetic batch (seeded by its worker
index) at every step. Worker 0 (``--report``, or autodist's chief) talks to the
harness on stdin/stdout, in lines starting with ``MARKER``::

    worker 0 -> harness   @@step_time {"event": "ready", ...}            after the warm-up steps (autodist's
                                                                         chief adds startup_s, plan_s, transform_s)
    harness  -> worker 0  go                                             (the harness took its snapshots)
    worker 0 -> harness   @@step_time {"event": "done", "ms": [...]}     the timed steps' wall times
    harness  -> worker 0  loss                                           (the harness read its counters)
    worker 0 -> harness   @@step_time {"event": "loss", "loss": ...}     the loss after them (autodist; else null)
    harness  -> worker 0  end

The pause at ``ready`` lets the harness read CPU times and socket counters
exactly around the timed steps; the other workers block in their next step
meanwhile (every configuration is synchronous), so no work is lost or counted
twice. After their last step the other processes (autodist's other node runs
this script with the chief's argv, so it gets the same options) wait for the
file ``--release`` to appear: they stay alive, sockets open, until the harness
has read their counters, then exit by themselves. Nothing here waits without a
bound: stdin is read with a timeout, an end of file (the harness is gone) ends
the process, and the release file is awaited at most ``--timeout`` seconds.
"""
import argparse
import json
import os
import select
import sys
import time

from step_time_models import eager_model, graph_logits, loss, model_named, synthetic_batch

__all__ = ["MARKER", "main"]

MARKER = "@@step_time "
RELEASE_POLL = 0.05   # s between checks for the release file
STARTED = time.monotonic()   # this process's start, near enough: what comes before is Python's own start


def emit(event, **fields):
    """One marker line to the harness, written whole (the chief's stdout also carries the other node's)."""
    sys.stdout.write(MARKER + json.dumps(dict(fields, event=event)) + "\n")
    sys.stdout.flush()


def expect(word, timeout):
    """Block until the harness writes ``word`` on stdin, at most ``timeout`` seconds."""
    ready, _, _ = select.select([sys.stdin], [], [], timeout)
    line = sys.stdin.readline() if ready else None
    if line is None:
        raise SystemExit("step_time: no {!r} from the harness within {:.0f} s".format(word, timeout))
    if line.strip() != word:
        raise SystemExit("step_time: expected {!r} from the harness, got {!r}".format(word, line.strip()))


def timed_loop(step, args, report, final_loss=None, facts=None):
    """``args.warmup`` untimed steps, then ``args.steps`` timed ones; worker 0 reports them (and ``final_loss()``).
    ``ready`` carries ``startup_s``, from this process's start to the end of its first step, and ``facts()``."""
    startup = None
    for index in range(args.warmup):
        step()
        startup = time.monotonic() - STARTED if index == 0 else startup
    if report:
        emit("ready", startup_s=startup, **(facts() if facts is not None else {}))
        expect("go", args.timeout)
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        step()
        times.append((time.perf_counter() - start) * 1e3)
    if report:   # the loss after the harness read the counters: a new fetch's first run is no timed step's work
        emit("done", ms=times)
        expect("loss", args.timeout)
        emit("loss", loss=final_loss() if final_loss is not None else None)
        expect("end", args.timeout)
    else:
        wait_for_release(args.release, args.timeout)


def wait_for_release(path, timeout):
    """Until the harness creates ``path`` (it has read this process's counters), or its parent is gone."""
    parent, deadline = os.getppid(), time.monotonic() + timeout
    while not os.path.exists(path):
        if os.getppid() != parent or time.monotonic() > deadline:
            raise SystemExit("step_time: not released by the harness ({} did not appear) within {:.0f} s".format(
                path, timeout))
        time.sleep(RELEASE_POLL)


def _placeholders(tf, model, batch_size=None):
    tf1 = tf.compat.v1
    x = tf1.placeholder(tf.int64 if model.input_ids else tf.float32, (batch_size,) + model.input_shape, name="x")
    y = tf1.placeholder(tf.int64 if model.classes else tf.float32,
                        (batch_size,) if model.classes else (batch_size, 1), name="y")
    return x, y


class _PlanTimer:
    """Seconds the chief spends planning (``runtime.job.build_strategy``: the builder and the compiler) and
    rewriting (``GraphTransformer.transform``), and the plan AutoStrategy chose with every candidate's
    prediction and the calibration it priced them with, read by wrapping those functions in this process (the
    benchmark's own instrument; autodist keeps no such record)."""

    def __init__(self):
        from autodist.kernel.graph_transformer import GraphTransformer
        from autodist.runtime import job
        from autodist.strategies import AutoStrategy
        self.facts = {"plan_s": 0.0, "transform_s": 0.0}
        self._wrap(job, "build_strategy", "plan_s")
        self._wrap(GraphTransformer, "transform", "transform_s")
        search = AutoStrategy.search

        def chosen(builder, graph_item, resource_spec):
            result = search(builder, graph_item, resource_spec)
            self.facts["chosen"] = result.chosen
            self.facts["auto"] = result.to_dict()   # every candidate's prediction, for paper_table_model.py
            self.facts["calibration"] = builder.calibration(resource_spec).to_dict()   # what they were priced with
            return result
        AutoStrategy.search = chosen

    def _wrap(self, owner, name, key):
        original = getattr(owner, name)

        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.facts[key] += time.perf_counter() - started
        setattr(owner, name, timed)


def run_autodist(args, model):
    import tensorflow as tf
    import autodist
    from autodist import strategies
    timer = _PlanTimer()
    arguments = json.loads(args.builder_args)
    if args.builder == "AutoStrategy":   # the per-replica batch, which the placeholders leave open, as a user states it
        arguments.setdefault("batch", model.batch)
    ad = autodist.AutoDist(args.spec, getattr(strategies, args.builder)(**arguments),
                           accumulation_steps=args.accumulation)
    x_np, y_np = synthetic_batch(model, model.batch, seed=ad.worker_index)
    with tf.Graph().as_default(), ad.scope():
        tf.compat.v1.set_random_seed(0)   # the same initial values in every configuration: losses compare
        x, y = _placeholders(tf, model)
        total = loss(model, graph_logits(model, x), y)
        if args.optimizer == "keras_adam":
            import keras
            variables = tf.compat.v1.trainable_variables()
            train = keras.optimizers.Adam(model.learning_rate).apply_gradients(
                zip(tf.gradients(total, variables), variables))
        else:
            train = tf.compat.v1.train.GradientDescentOptimizer(model.learning_rate).minimize(total)
        session = ad.create_distributed_session()
        feed = {x: x_np, y: y_np}
        timed_loop(lambda: session.run(train, feed), args, report=ad.is_chief,
                   final_loss=lambda: float(session.run(total, feed)), facts=lambda: dict(timer.facts))


def hand_ps_train_op(tf, model, x, y, task, workers, step):
    """Worker ``task``'s train op of the hand-written synchronous parameter server.

    Variables, one (Sparse)ConditionalAccumulator per variable and one token
    queue per worker live on ``/job:ps/task:0``; the forward and backward pass
    run on the worker. Each step::

        every worker   apply_grad(g_v) to acc_v for every v  ->  dequeue a token from its queue
        worker 0       ... then take_grad(workers) from every acc_v, v -= lr / workers * sum,
                       enqueue one token into every worker's queue, dequeue its own

    so no worker starts step k+1 before the update of step k is applied.
    """
    tf1 = tf.compat.v1
    ps = "/job:ps/task:0"
    with tf1.device(tf1.train.replica_device_setter(ps_tasks=1, ps_device=ps,
                                                   worker_device="/job:worker/task:{}".format(task))):
        total = loss(model, graph_logits(model, x), y)
        variables = tf1.trainable_variables()
        grads = tf.gradients(total, variables)
    with tf.device(ps):
        queues = [tf1.FIFOQueue(workers, [tf.bool], [[]], shared_name="token{}".format(k), name="token{}".format(k))
                  for k in range(workers)]
        accumulators = [
            (tf1.SparseConditionalAccumulator if isinstance(g, tf.IndexedSlices) else tf1.ConditionalAccumulator)(
                v.dtype.base_dtype, v.shape, shared_name="acc/" + v.op.name, name="acc/" + v.op.name,
                reduction_type="SUM") for v, g in zip(variables, grads)]
    applied = [acc.apply_indexed_slices_grad(g, step) if isinstance(g, tf.IndexedSlices) else acc.apply_grad(g, step)
               for acc, g in zip(accumulators, grads)]
    if task != 0:
        with tf.control_dependencies(applied):
            return queues[task].dequeue()
    with tf.control_dependencies(applied), tf.device(ps):
        updates = _sgd_from_accumulators(tf, variables, accumulators, model.learning_rate / workers, workers)
    with tf.control_dependencies(updates):
        tokens = [q.enqueue(True) for q in queues]
    with tf.control_dependencies(tokens):
        return queues[0].dequeue()


def _sgd_from_accumulators(tf, variables, accumulators, scale, workers):
    """``v -= scale * (sum of the workers' gradients)`` for every variable, once all have arrived."""
    updates = []
    for v, acc in zip(variables, accumulators):
        if isinstance(acc, tf.compat.v1.SparseConditionalAccumulator):
            summed = acc.take_indexed_slices_grad(workers)
            updates.append(v.scatter_sub(tf.IndexedSlices(summed.values * scale, summed.indices)))
        else:
            updates.append(v.assign_sub(acc.take_grad(workers) * scale))
    return updates


def _wait_initialized(tf, session, timeout):
    """Worker k > 0: wait until worker 0 has initialized the parameter server's variables."""
    uninitialized = tf.compat.v1.report_uninitialized_variables()
    deadline = time.monotonic() + timeout
    while len(session.run(uninitialized)):
        if time.monotonic() > deadline:
            raise SystemExit("hand_ps worker: worker 0 did not initialize the variables on the "
                             "parameter server within {:.0f} s".format(timeout))
        time.sleep(0.1)


def run_hand_ps(args, model):
    import tensorflow as tf
    tf1 = tf.compat.v1
    cluster = json.loads(args.cluster)
    job, task = ("ps", 0) if args.task == "ps" else ("worker", int(args.task))
    config = tf1.ConfigProto(allow_soft_placement=True)
    if job == "worker":
        config.device_filters.extend(["/job:ps", "/job:worker/task:{}".format(task)])
    server = tf.distribute.Server(tf.train.ClusterSpec(cluster), job_name=job, task_index=task, config=config)
    if job == "ps":
        wait_for_release(args.release, args.timeout)
        return
    workers = len(cluster["worker"])
    x_np, y_np = synthetic_batch(model, model.batch, seed=task)
    with tf.Graph().as_default():
        x, y = _placeholders(tf, model)
        step = tf1.placeholder(tf.int64, [], name="local_step")
        train = hand_ps_train_op(tf, model, x, y, task, workers, step)
        session = tf1.Session(server.target, config=config)
        if task == 0:
            session.run(tf1.global_variables_initializer())
        else:
            _wait_initialized(tf, session, args.timeout)
        count = iter(range(args.warmup + args.steps))
        timed_loop(lambda: session.run(train, {x: x_np, y: y_np, step: next(count)}), args, report=task == 0)


def run_mwms(args, model):
    cluster = json.loads(args.cluster)
    task = int(args.task)
    os.environ["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": task}})
    import keras
    import tensorflow as tf
    options = tf.distribute.experimental.CommunicationOptions(
        bytes_per_pack=args.pack, implementation=tf.distribute.experimental.CommunicationImplementation.RING)
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    x, y = (tf.constant(a) for a in synthetic_batch(model, model.batch, seed=task))
    with strategy.scope():
        forward, variables = eager_model(model, x)
        optimizer = keras.optimizers.SGD(model.learning_rate)
    replicas = strategy.num_replicas_in_sync

    def replica_step():   # Keras' optimizer sums the replicas' gradients: scale the loss
        with tf.GradientTape() as tape:
            value = loss(model, forward(x), y) / replicas
        grads = tape.gradient(value, variables)
        optimizer.apply_gradients(zip(grads, variables))
        return value

    step = tf.function(lambda: strategy.run(replica_step))
    timed_loop(lambda: step().numpy(), args, report=task == 0)


def run_single(args, model):
    import tensorflow as tf
    tf1 = tf.compat.v1
    x_np, y_np = synthetic_batch(model, model.batch * args.workers, seed=0)
    with tf.Graph().as_default():
        x, y = _placeholders(tf, model)
        train = tf1.train.GradientDescentOptimizer(model.learning_rate).minimize(
            loss(model, graph_logits(model, x), y))
        session = tf1.Session()
        session.run(tf1.global_variables_initializer())
        timed_loop(lambda: session.run(train, {x: x_np, y: y_np}), args, report=True)


ROLES = {"autodist": run_autodist, "hand_ps": run_hand_ps, "mwms": run_mwms, "single": run_single}


def _parser():
    parser = argparse.ArgumentParser(prog="step_time.py --role", description="one process of a configuration")
    parser.add_argument("role", choices=sorted(ROLES))
    parser.add_argument("--model", required=True, help="a model of step_time_models or a family of paper_models")
    parser.add_argument("--warmup", type=int, required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--timeout", type=float, required=True, help="bound of every wait, s")
    parser.add_argument("--release", required=True, help="the file whose creation lets the other processes exit")
    parser.add_argument("--builder", help="autodist: the strategy builder's class name")
    parser.add_argument("--builder-args", default="{}", help="autodist: the builder's arguments as JSON")
    parser.add_argument("--spec", help="autodist: the resource spec file")
    parser.add_argument("--optimizer", choices=("sgd", "keras_adam"), default="sgd",
                        help="autodist: plain SGD (tf1, as the baselines), or Keras 3 Adam")
    parser.add_argument("--accumulation", type=int, default=None,
                        help="autodist: accumulate gradients over this many calls (AutoDist(accumulation_steps=))")
    parser.add_argument("--cluster", help="hand_ps, mwms: the cluster spec as JSON")
    parser.add_argument("--task", help="hand_ps: 'ps' or a worker index; mwms: the worker index")
    parser.add_argument("--pack", type=int, default=0, help="mwms: bytes per pack (0: one pack)")
    parser.add_argument("--workers", type=int, default=2, help="single: the global batch is this many batches")
    return parser


def main(argv):
    args = _parser().parse_args(argv)
    ROLES[args.role](args, model_named(args.model))
    return 0

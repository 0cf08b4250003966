"""The probe's protocol steps: every node runs its own client, as in a job.

A job's step is not one session's: every node's script runs its own
``session.run``, and the synchronous parameter server ties them together
(``kernel/synchronization/ps.py``)::

    node k:  pull v (server -> k) ... push grad -> [accumulator on the server] ... wait(token_k)
    chief:   pull v ... push grad -> [accumulator] -> take(N) -> apply to v -> release token_k

This module builds those ops (the same TensorFlow kernels: ConditionalAccumulator,
SparseConditionalAccumulator, a token FIFOQueue on the chief) for variables of
known sizes on the last node's server, and a one-float all-reduce. As in a job,
every node runs its own client: the probe's job launches ``python -m
autodist.runtime.calibrate.protocol`` on every other node (``member_main``),
which builds the same graph (the same shared resources, matched by name) and
runs each measurement's steps in step with the chief, which times them. The
probe (:mod:`.probe`) fits from them what a single session's fetches cannot show:

    ps_one      one 1-float variable: the protocol's own cost per step
    ps_many     PS_VARIABLES of them: (ps_many - ps_one) / (PS_VARIABLES - 1) per variable
    ps_sparse   one SPARSE_ROWS x SPARSE_WIDTH table, SPARSE_ROWS distinct rows pushed by every
                node (sparse accumulator, take, scatter update): the servers' sparse rate
    ar_step     a one-float all-reduce run by every node, as the kernel runs a small bucket (an
                all-gather whose rows every node adds): a collective step's own cost
    ar_big      a COLLECTIVE_BYTES all-reduce run by every node: (ar_big - ar_step), less the
                ring's N - 1 messages beyond the gather's, is its bytes on the ring
    ar_sparse   the kernel's sparse all-reduce (``all_reduce.gather_rows``) of SPARSE_ROWS distinct
                rows a node, every node applying all rows to its own table as SGD does: beyond
                ar_step, the gathers' bytes and messages and the node's own rows' apply, the rate
                at which a replica takes in and applies the other replicas' rows
    ar_sparse_small
                SPARSE_SMALL_TABLES such all-reduces in one step, of SPARSE_SMALL_ROWS rows each:
                beyond ar_step and their messages and bytes, what a step's chain of gathers (row
                counts, then rows; the tables side by side) costs of itself, once (ncf's four
                256-row tables: 2.3 ms beyond their messages on 2 hosts); ar_sparse's residual
                is read without it

Each figure is the median of ``repeats`` runs of ``steps`` steps, per step.
"""
import statistics
import time

__all__ = ["PS_VARIABLES", "SPARSE_ROWS", "SPARSE_WIDTH", "TABLE_ROWS", "SPARSE_SMALL_TABLES", "SPARSE_SMALL_ROWS",
           "COLLECTIVE_BYTES", "MEASUREMENTS", "MEMBER_TIMEOUT", "STEPS", "STEPS_OF", "SLOW_STEPS_OF", "steps_of",
           "sparse_rows", "protocol_graph", "time_protocol", "task_devices", "member_main"]

PS_VARIABLES = 16
SPARSE_ROWS = 4096
SPARSE_WIDTH = 64
TABLE_ROWS = 4 * SPARSE_ROWS
_ANY_STEP = 2 ** 62
#: The protocol measurements, in the order every node runs them.
MEASUREMENTS = ("ps_one", "ps_many", "ps_sparse", "ar_step", "ar_big", "ar_sparse", "ar_sparse_small")
#: The collective group and first instance key of the sparse all-reduce (apart from the other collectives'),
#: and of the small ones: each takes 1 + 2 x 32 keys (``all_reduce.gather_keys``), the big one 8001-8065, the
#: four small ones 8501-8760.
_SPARSE_GROUP, _SPARSE_KEY_BASE, _SMALL_KEY_BASE = 8, 8000, 8500
#: The small sparse all-reduces of one step: tables, and distinct rows a node (their bytes stay negligible).
SPARSE_SMALL_TABLES, SPARSE_SMALL_ROWS = 4, 8
#: Bytes of the big all-reduce every node runs (the collective bandwidth).
COLLECTIVE_BYTES = 16 << 20
STEPS = 20
#: Fewer steps for a measurement whose step moves many bytes: the 16 MiB ring always (a hop takes 0.7 s at
#: 200 Mbit/s), the sparse steps on slow links too (``steps_of``: 1 MiB a node, 7 MiB a hop on 8 hosts; 20
#: steps of each took 40 s at 250 Mbit/s). Every node runs each measurement with the same count.
STEPS_OF = {"ar_big": 5}
SLOW_STEPS_OF = {"ps_sparse": 5, "ar_sparse": 5}


def steps_of(slow):
    """``{measurement: steps}`` where it is not STEPS: on ``slow`` links (``probe.slow_links``) fewer sparse ones."""
    return dict(STEPS_OF, **(SLOW_STEPS_OF if slow else {}))
#: Seconds another node's process waits for the chief at most (the first step, each step).
MEMBER_TIMEOUT = 120.0


def _ps_variable(tf, devices, name, size, tokens):
    """One dense variable under the synchronous protocol: ``(chief's apply, [every node's push])``."""
    tf1 = tf.compat.v1
    with tf.device(devices[-1]):
        var = tf1.Variable(tf.zeros([size]), name=name, use_resource=True)
        acc = tf1.ConditionalAccumulator(tf.float32, shape=[size], shared_name=tokens + "/" + name,
                                         reduction_type="SUM", name=name + "_acc")
    pushes = []
    for device in devices:
        with tf.device(device):
            grad = var.read_value() + 1.0
        with tf.device(devices[-1]):
            pushes.append(acc.apply_grad(grad, local_step=_ANY_STEP))
    with tf.device(devices[-1]), tf.control_dependencies([pushes[0]]):
        apply = var.assign_sub(0.01 * acc.take_grad(len(devices)) / len(devices)).op
    return var, apply, pushes


def _sparse_variable(tf, devices, name, tokens):
    """The sparse table under the protocol: every node pulls and pushes ``SPARSE_ROWS`` distinct rows."""
    tf1 = tf.compat.v1
    with tf.device(devices[-1]):
        var = tf1.Variable(tf.zeros([TABLE_ROWS, SPARSE_WIDTH]), name=name, use_resource=True)
        acc = tf1.SparseConditionalAccumulator(tf.float32, shape=[TABLE_ROWS, SPARSE_WIDTH],
                                               shared_name=tokens + "/" + name, reduction_type="SUM",
                                               name=name + "_acc")
    pushes = []
    for k, device in enumerate(devices):
        with tf.device(device):
            ids, _ = sparse_rows(tf, k)
        with tf.device(devices[-1]):
            rows = tf.gather(var, ids)
        with tf.device(device):
            values = rows + 1.0
        with tf.device(devices[-1]):
            pushes.append(acc.apply_indexed_slices_grad(
                tf.IndexedSlices(values, ids, tf.constant([TABLE_ROWS, SPARSE_WIDTH], tf.int64)),
                local_step=_ANY_STEP))
    with tf.device(devices[-1]), tf.control_dependencies([pushes[0]]):
        taken = acc.take_indexed_slices_grad(len(devices))
        apply = var.scatter_sub(tf.IndexedSlices(0.01 * taken.values, taken.indices)).op
    return var, apply, pushes


def _ps_step(tf, devices, name, variables):
    """Per node, the fetch of one protocol step over ``variables`` (``(var, apply, pushes)``)."""
    n = len(devices)
    queues = {}
    with tf.device(devices[0]):
        for task in range(1, n):
            queues[task] = tf.queue.FIFOQueue(2 ** 30, [tf.int32], shapes=[[]],
                                              shared_name="{}/tokens/{}".format(name, task))
        with tf.control_dependencies([apply for _, apply, _ in variables]):
            release = tf.group(*[queues[task].enqueue(0) for task in queues])
    fetches = [release if n > 1 else tf.group(*[apply for _, apply, _ in variables])]
    for task in range(1, n):
        with tf.device(devices[0]), tf.control_dependencies([pushes[task] for _, _, pushes in variables]):
            fetches.append(queues[task].dequeue().op)
    return fetches


def protocol_graph(tf, devices, name="protocol"):
    """``({measurement: [fetch of node 0, node 1, ...]}, initializers)`` on ``devices`` (the chief's first)."""
    with tf.compat.v1.name_scope(name + "/"):
        return _protocol_ops(tf, devices, name)


def _protocol_ops(tf, devices, name):
    from tensorflow.python.ops import collective_ops

    from autodist.plan.contract import gathers
    from autodist.kernel.synchronization.compressor import gathered_mean
    steps, variables = {}, []
    one = [_ps_variable(tf, devices, "one0", 1, name + "/one")]
    many = [_ps_variable(tf, devices, "many{}".format(i), 1, name + "/many") for i in range(PS_VARIABLES)]
    sparse = [_sparse_variable(tf, devices, "sparse", name + "/sparse")]
    for key, group in (("ps_one", one), ("ps_many", many), ("ps_sparse", sparse)):
        steps[key] = _ps_step(tf, devices, "{}/{}".format(name, key), group)
        variables += [var for var, _, _ in group]
    if len(devices) > 1:
        for key, elements, instance in (("ar_step", 1, 7001), ("ar_big", COLLECTIVE_BYTES // 4, 7002)):
            steps[key] = []
            for device in devices:
                with tf.device(device):
                    ones = tf.ones([elements])
                    if gathers(elements * 4, devices):   # the kernel's small buckets: all-gather, added locally
                        rows = collective_ops.all_gather_v2(tf.reshape(ones, [1, -1]), len(devices), 7, instance)
                        steps[key].append(gathered_mean(rows, len(devices)).op)
                    else:
                        steps[key].append(collective_ops.all_reduce_v2(
                            ones, len(devices), 7, instance, merge_op="Add", final_op="Id").op)
        steps["ar_sparse"], tables = _sparse_all_reduce(tf, devices, name)
        steps["ar_sparse_small"], small_tables = _sparse_all_reduce(
            tf, devices, name, tables=SPARSE_SMALL_TABLES, rows=SPARSE_SMALL_ROWS, key_base=_SMALL_KEY_BASE)
        variables += tables + small_tables
    return steps, [v.initializer for v in variables]


def sparse_rows(tf, k, rows=SPARSE_ROWS):
    """Node ``k``'s ``rows`` distinct row ids of a table of ``4 * rows`` rows, and their values."""
    ids = tf.range(rows, dtype=tf.int64) * 4 + k % 4
    return ids, tf.fill([rows, SPARSE_WIDTH], 1.0)


def _sparse_all_reduce(tf, devices, name, tables=1, rows=SPARSE_ROWS, key_base=_SPARSE_KEY_BASE):
    """``([every node's step], tables)``: the kernel's sparse all-reduce of each node's ``rows`` rows of each of
    ``tables`` tables, the gathered rows applied to the node's own table (``scatter_sub``, SGD's sparse apply)."""
    from types import SimpleNamespace

    from autodist.kernel.synchronization.all_reduce import gather_keys, gather_rows
    from autodist.kernel.synchronization.compressor import Collectives
    graph, steps, made = tf.compat.v1.get_default_graph(), [], []
    group = SimpleNamespace(key_base=key_base, num_replicas=len(devices), group_key=_SPARSE_GROUP)
    for k, device in enumerate(devices):
        collectives = Collectives(group)   # every node's gathers get the same keys, as in a job
        applies = []
        for t in range(tables):
            scope = "ar_sparse{}".format(k) if tables == 1 else "ar_sparse_small{}_{}".format(k, t)
            with tf.device(device), tf.compat.v1.name_scope(scope):
                table = tf.compat.v1.Variable(tf.zeros([4 * rows, SPARSE_WIDTH]), name="table", use_resource=True)
                ids, values = sparse_rows(tf, k, rows)
                gathered_rows = gather_rows(collectives, values, ids, gather_keys(collectives), "ring")
                gathered = tf.IndexedSlices(0.01 * graph.get_tensor_by_name(gathered_rows["values"]),
                                            graph.get_tensor_by_name(gathered_rows["indices"]))
                applies.append(table.scatter_sub(gathered).op)
            made.append(table)
        with tf.device(device):
            steps.append(applies[0] if tables == 1 else tf.group(*applies))
    return steps, made


def task_devices(context):
    """The probe's device order, the same in every process of its job: the chief's CPU, then the others'."""
    from autodist.plan.names import host_cpu
    order = [context.chief_task] + [t for t in range(context.num_tasks) if t != context.chief_task]
    return [host_cpu(t) for t in order], order.index(context.task_index)


def _run(step, steps):
    started = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - started) / steps


def time_protocol(session, fetch, steps=STEPS, repeats=5):
    """The median of ``repeats`` runs of ``steps`` protocol steps, per step. Every node's process
    calls this with the same arguments at the same time (the protocol holds them in step). A step
    is a callable, as a job's repeated training step is (``runtime.session.run_plans``)."""
    step = session.make_callable(fetch)
    _run(step, 2)
    return statistics.median(_run(step, steps) for _ in range(repeats))


def _wait_initialized(tf, session, timeout):
    """Wait (bounded) for the chief to initialize the protocol's variables."""
    pending = tf.compat.v1.report_uninitialized_variables()
    deadline = time.monotonic() + timeout
    while len(session.run(pending)):
        if time.monotonic() > deadline:
            raise TimeoutError("the probe's variables were not initialized by the chief within {:.0f} s".format(
                timeout))
        time.sleep(0.1)


def member_main(argv=None):
    """Another node's side of the probe: run the protocol steps in step with the chief, then exit."""
    import argparse
    import json
    import os
    import tensorflow as tf
    from autodist.runtime.context import JobContext
    from autodist.runtime.launch.member_server import serve
    from autodist.runtime.watch.step_report import StepMonitor
    from autodist.spec.cluster import node_config
    parser = argparse.ArgumentParser(description="the calibration probe's protocol steps on a node")
    parser.add_argument("--repeats", type=int, required=True)
    parser.add_argument("--slow", action="store_true", help="slow links: fewer sparse steps (steps_of)")
    parser.add_argument("--timeout", type=float, default=MEMBER_TIMEOUT)
    parser.add_argument("--nodes", default="{}", help="JSON: address -> [cpus, threads, cores] of its server")
    args = parser.parse_args(argv)
    context = JobContext.from_env(os.environ)
    if context.serves:   # this process hosts its node's server, as a job's script does
        cpus, threads, cores = json.loads(args.nodes).get(context.address, [1, 0, []])
        serve(context, cpus, threads, StepMonitor(), cores=cores)
    devices, index = task_devices(context)
    config = node_config(1, context.chief_task)
    config.operation_timeout_in_ms = int(args.timeout * 1e3)   # a step the chief never joins fails, bounded
    graph = tf.Graph()
    with graph.as_default():
        steps, _ = protocol_graph(tf, devices)
        with tf.compat.v1.Session(context.target, graph=graph, config=config) as session:
            _wait_initialized(tf, session, args.timeout)
            counts = steps_of(args.slow)
            for key in MEASUREMENTS:
                if key in steps:
                    time_protocol(session, steps[key][index], counts.get(key, STEPS), repeats=args.repeats)
    return 0


if __name__ == "__main__":
    import sys
    sys.exit(member_main())

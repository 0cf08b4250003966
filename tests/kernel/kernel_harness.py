"""Helpers of the kernel tests: capture a tiny graph, hand-make a strategy, transform, run.

    item = capture(build)                         # build() runs inside capture_optimizers()
    strategy = make_strategy(["/job:worker/task:0/device:CPU:0", ...],
                             ps={"w": dict(device=CPU0, sync=True)}, ar={"b": {}})
    result = transform(item, strategy)            # GraphTransformer, no server
    node = cluster.open(result, task=0)           # import, session on the in-process server, INIT_OPS

Hand-made strategies test the kernels without builders. ``InProcessCluster``
keeps one TensorFlow server per task in this process (several tasks in one
process is how TensorFlow's own local-cluster tests work); every transform
gets a fresh job id and collective key base, so tests sharing the servers
never meet, and each job's container is reset when its test is done.
"""
import concurrent.futures
import itertools
import uuid

import numpy as np
import tensorflow as tf

from autodist.capture.optimizers import capture_optimizers
from autodist.spec.cluster import node_config
from autodist.capture.graph_item import GraphItem
from autodist.kernel.assignment import NodeContext
from autodist.kernel.graph_transformer import GraphTransformer
from autodist.plan.names import INIT_OPS, job_container
from autodist.runner import free_ports
from hand_plans import AR, device, make_strategy  # noqa: F401 (the kernel tests import them from here)

tf1 = tf.compat.v1
RUN_TIMEOUT_MS = 30000
_keys = itertools.count(1)


def capture(build):
    """A prepared GraphItem of the graph ``build()`` makes, and what ``build`` returned."""
    graph = tf.Graph()
    item = GraphItem(graph)
    with capture_optimizers(), item.as_default():
        built = build()
    item.prepare()
    return item, built


def node_context(task=0, num_tasks=1, job_id=None):
    return NodeContext(job_id=job_id or "kt-" + uuid.uuid4().hex[:10], task_index=task, num_tasks=num_tasks,
                       collective_key_base=100000 * (5000 + next(_keys)))


def transform(item, strategy, task=0, num_tasks=1, job_id=None):
    return GraphTransformer(strategy, node_context(task, num_tasks, job_id)).transform(item)


def transform_job(build, strategy, num_tasks):
    """Every node's TransformResult for one job (each node captures its own graph, as in a real job)."""
    job_id = "kt-" + uuid.uuid4().hex[:10]
    base = 100000 * (5000 + next(_keys))
    results = []
    for task in range(num_tasks):
        item, _ = capture(build)
        node = NodeContext(job_id=job_id, task_index=task, num_tasks=num_tasks, collective_key_base=base)
        results.append(GraphTransformer(strategy, node).transform(item))
    return results


def nodes_by_name(graph_def):
    return {node.name: node for node in graph_def.node}


class Node:
    """One node's imported distributed graph and a session on its server."""

    def __init__(self, result, target, cpus):
        self.result = result
        self.assignment = result.assignment
        self.graph = tf.Graph()
        with self.graph.as_default():
            tf1.import_graph_def(result.item.graph_def, name="")
        self.session = tf1.Session(target, graph=self.graph, config=node_config(cpus, 0))
        self.target = target

    def run(self, fetches, feed_dict=None):
        return self.session.run(fetches, feed_dict, options=tf1.RunOptions(timeout_in_ms=RUN_TIMEOUT_MS))

    def init(self):
        for op in INIT_OPS:
            self.run(op)
        return self

    def read(self, var_op):
        """The value of the resource variable whose handle op is ``var_op`` (a read op is added once)."""
        name = "kernel-test-read/" + var_op
        try:
            tensor = self.graph.get_tensor_by_name(name + ":0")
        except KeyError:
            handle = self.graph.get_operation_by_name(var_op)
            with self.graph.as_default(), tf.device(handle.device):
                tensor = tf.raw_ops.ReadVariableOp(resource=handle.outputs[0], dtype=handle.get_attr("dtype"),
                                                   name=name)
        return self.run(tensor)

    def assign(self, var_op, value):
        """Write ``value`` into the resource variable ``var_op`` (bypassing the training graph)."""
        handle = self.graph.get_operation_by_name(var_op)
        with self.graph.as_default(), tf.device(handle.device):
            op = tf.raw_ops.AssignVariableOp(resource=handle.outputs[0], value=tf.constant(value))
        self.run(op)

    def rows(self, replica, value):
        """Replica ``replica``'s share of a global batch: equal slices in global replica order."""
        share = len(value) // self.assignment.num_replicas
        return value[replica.global_index * share:(replica.global_index + 1) * share]

    def train_global(self, global_feeds, fetches=()):
        """One step on this node's rows of a global batch; returns the values of ``fetches``."""
        feeds = {name: [self.rows(r, value) for r in self.assignment.local] for name, value in global_feeds.items()}
        names = [r.prefix + op for r in self.assignment.local for op in self.assignment.analysis.train_ops]
        return self.run([list(fetches), names], self.replica_feeds(feeds))[0]

    def train(self, feeds):
        """One step: every local replica's train ops; ``feeds`` maps single-device names to
        per-local-replica values (a list) or one value for every replica."""
        names = [r.prefix + op for r in self.assignment.local for op in self.assignment.analysis.train_ops]
        return self.run(names, self.replica_feeds(feeds))

    def replica_feeds(self, feeds):
        out = {}
        for name, value in feeds.items():
            for i, replica in enumerate(self.assignment.local):
                out[replica.prefix + name] = value[i] if isinstance(value, list) else value
        return out

    def close(self):
        self.session.close()
        tf1.Session.reset(self.target, [job_container(self.assignment.node.job_id)])


class InProcessCluster:
    """``num_tasks`` TensorFlow servers (job "worker") with ``cpus`` CPU devices each, in this process."""

    def __init__(self, num_tasks, cpus=2):
        ports = free_ports(count=num_tasks)
        spec = {"worker": ["localhost:{}".format(p) for p in ports]}
        self.cpus = cpus
        self.servers = [tf.distribute.Server(spec, job_name="worker", task_index=i, config=node_config(cpus, 0))
                        for i in range(num_tasks)]
        self._open = []

    def open(self, result, task=0, init=True):
        node = Node(result, self.servers[task].target, self.cpus)
        self._open.append(node)
        return node.init() if init else node

    def open_job(self, results):
        """Open and initialize every node of a job at once (initialization is a collective)."""
        nodes = [self.open(r, task, init=False) for task, r in enumerate(results)]
        parallel([n.init for n in nodes])
        return nodes

    def close_all(self):
        while self._open:
            self._open.pop().close()


def parallel(calls, timeout=60.0):
    """Run the zero-argument ``calls`` at once (one per node); their results, in order."""
    with concurrent.futures.ThreadPoolExecutor(len(calls)) as pool:
        futures = [pool.submit(c) for c in calls]
        return [f.result(timeout=timeout) for f in futures]


def sgd_linear(x_shape=(None, 2), w_init=((1.0,), (2.0,)), lr=0.1, optimizer=None):
    """x -> x @ w + b, squared-error loss against y; returns a dict of its tensors and ops."""
    def build():
        x = tf1.placeholder(tf.float32, list(x_shape), name="x")
        y = tf1.placeholder(tf.float32, [None, 1], name="y")
        w = tf1.get_variable("w", initializer=tf.constant(np.array(w_init, np.float32)))
        b = tf1.get_variable("b", initializer=tf.zeros([1]))
        per_example = tf.square(tf.matmul(x, w) + b - y)[:, 0]
        loss = tf.reduce_mean(per_example)
        opt = optimizer() if optimizer else tf1.train.GradientDescentOptimizer(lr)
        train = opt.minimize(loss)
        return {"x": x, "y": y, "w": w, "b": b, "loss": loss, "per_example": per_example, "train": train}
    return build


def reference_run(build, feeds_per_step, fetch_names):
    """Single-device run of ``build``'s graph: the values of ``fetch_names`` after each step."""
    item, built = capture(build)
    with item.graph.as_default(), tf1.Session(graph=item.graph) as sess:
        sess.run(tf1.global_variables_initializer())
        out = []
        for feeds in feeds_per_step:
            sess.run(built["train"], {item.graph.get_tensor_by_name(k): v for k, v in feeds.items()})
            out.append(sess.run(fetch_names))
        return out

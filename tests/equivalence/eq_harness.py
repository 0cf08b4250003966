"""Run one equivalence case: single-device reference, and one node of a distributed job.

Distributed cases go through the public API: ``AutoDist(spec, builder,
job=JobContext(...))`` attached to TensorFlow servers that live for the whole
test module (starting TensorFlow costs seconds per process), each case a job
of its own (own job id, container and collective keys).
"""
import importlib
import itertools
import multiprocessing
import os
import traceback
import uuid

import numpy as np

STEPS = 3

#: topology -> [(address, number of CPU replicas)], chief first
TOPOLOGIES = {
    "1node-2replicas": [("127.0.0.1", 2)],
    "2nodes-1+1": [("127.0.0.1", 1), ("127.0.0.2", 1)],
    "2nodes-2+1": [("127.0.0.1", 2), ("127.0.0.2", 1)],
    "2nodes-2+2": [("127.0.0.1", 2), ("127.0.0.2", 2)],
}
_keys = itertools.count(1)


def new_case(builder, model, tmp_path, **extra):
    """A case: a job of its own (job id, strategy file, a collective key window no other case of the run has)."""
    return dict({"model": model, "builder": builder, "job_id": "eq-" + uuid.uuid4().hex[:12],
                 "strategy_path": str(tmp_path / "strategy.pb"), "key_base": next(_keys) * 100000}, **extra)


def builder_of(name, kwargs):
    from autodist import strategies
    return getattr(strategies, name)(**kwargs)


def _capture_scope():
    import contextlib
    from autodist.capture.optimizers import capture_optimizers
    from autodist.capture.graph_item import GraphItem
    import tensorflow as tf
    stack = contextlib.ExitStack()
    item = GraphItem(tf.compat.v1.get_default_graph())
    stack.enter_context(capture_optimizers())
    stack.enter_context(item.as_default())
    return stack


def reference(model_name):
    """k steps of the plain single-device graph on the global batch: (per-step losses, variables)."""
    import tensorflow as tf
    from autodist.capture.queries import tf_variable
    from eq_models import MODELS
    build, batch = MODELS[model_name]
    with tf.Graph().as_default():
        with _capture_scope():
            model = build()
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            losses = []
            for step in range(STEPS):
                feed = {model.placeholders[k]: v for k, v in batch(step).items()}
                losses.append(sess.run([model.train, model.per_example], feed)[1])
            return losses, sess.run([tf_variable(v) for v in model.variables])


def write_spec(directory, nodes):
    """A resource spec file in ``directory`` for ``nodes`` = [(address, number of CPU replicas)], chief first."""
    import yaml
    listed = [{"address": a, "cpus": list(range(c))} for a, c in nodes]
    if len(listed) > 1:
        listed[0]["chief"] = True
    path = os.path.join(str(directory), "spec.yml")
    with open(path, "w") as f:
        f.write(yaml.safe_dump({"nodes": listed}))
    return path


def job_autodist(case, address, servers, chief, spec_path):
    """This node's AutoDist of the case's job, attached to the pool's running servers."""
    import autodist
    from autodist.runtime.context import JobContext
    job = JobContext(job_id=case["job_id"], address=address, servers=servers, chief=chief,
                     strategy_path=case["strategy_path"], strategy_wait=60.0,
                     collective_key_base=case["key_base"])
    return autodist.AutoDist(spec_path, builder_of(case["builder"], case.get("kwargs", {})), job=job,
                             accumulation_steps=case.get("accumulation_steps"))


def run_node(case, address, servers, chief, spec_path, rows):
    """One node's part of a case; returns (per-step per-example losses of its rows, variables)."""
    import tensorflow as tf
    from eq_models import MODELS
    build, batch = MODELS[case["model"]]
    ad = job_autodist(case, address, servers, chief, spec_path)
    with tf.Graph().as_default(), ad.scope():
        model = build()
        sess = ad.create_distributed_session()
        try:
            losses = []
            for step in range(STEPS):
                feed = {model.placeholders[k]: v[rows] for k, v in batch(step).items()}
                losses.append(sess.run([model.train, model.per_example], feed)[1])
            values = sess.run(model.variables)
        finally:
            sess.close()
    return losses, values


def reset(job_id, target):
    """Drop a finished job's resources from a long-lived server (after every node is done)."""
    import tensorflow as tf
    from autodist.plan.names import job_container
    tf.compat.v1.Session.reset(target, [job_container(job_id)])


def node_process(conn, address, servers, chief, cpus, spec_path, models_dir):
    """A long-lived node: starts its server, then runs the cases it is sent until told to stop."""
    import sys
    sys.path.insert(0, models_dir)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from autodist.spec.cluster import node_config, start_server
    addresses = sorted(servers)
    server = start_server({"worker": [servers[a] for a in addresses]}, addresses.index(address),
                          node_config(cpus, addresses.index(chief), threads=2))
    conn.send(("ready", None))
    while True:
        message = conn.recv()
        if message is None:
            break
        if message[0] == "reset":
            reset(message[1], "grpc://" + servers[address])
            conn.send(("ok", None))
            continue
        case, rows = message
        try:   # a case names the module whose run_node it runs (default: this one's, the graph-mode cases)
            run = importlib.import_module(case["module"]).run_node if "module" in case else run_node
            conn.send(("ok", run(case, address, servers, chief, spec_path, rows)))
        except BaseException:  # reported to the test, which fails with it
            conn.send(("error", traceback.format_exc()))
    del server


class NodePool:
    """Long-lived node processes of one topology (chief first)."""

    def __init__(self, nodes, spec_path, models_dir, timeout=240.0):
        from autodist.runner import free_ports
        ports = free_ports(count=len(nodes))
        self.servers = {address: "{}:{}".format(address, port) for (address, _), port in zip(nodes, ports)}
        self.chief = nodes[0][0]
        self.timeout = timeout
        ctx = multiprocessing.get_context("spawn")
        self.nodes = []
        for address, cpus in nodes:
            parent, child = ctx.Pipe()
            process = ctx.Process(target=node_process, daemon=True,
                                  args=(child, address, self.servers, self.chief, cpus, spec_path, models_dir))
            process.start()
            self.nodes.append((address, parent, process))
        for address, conn, _ in self.nodes:
            self._receive(address, conn)

    def _receive(self, address, conn, timeout=None):
        timeout = self.timeout if timeout is None else timeout
        if not conn.poll(timeout):
            self.close()
            raise TimeoutError("node {} did not answer within {:.0f} s".format(address, timeout))
        status, value = conn.recv()
        if status == "error":
            raise RuntimeError("node {} failed:\n{}".format(address, value))
        return value

    def run(self, case, rows):
        """Send ``case`` to every node (``rows[address]`` = its slice of the batch); return their results
        (waiting ``case["timeout"]`` s for each, if the case sets it, else the pool's timeout)."""
        for address, conn, _ in self.nodes:
            conn.send((case, rows[address]))
        results, errors = [], []
        for address, conn, _ in self.nodes:
            try:
                results.append(self._receive(address, conn, case.get("timeout")))
            except RuntimeError as e:  # the other nodes' answers are still read, then cleanup
                errors.append(e)
        for address, conn, _ in self.nodes:
            conn.send(("reset", case["job_id"]))
        for address, conn, _ in self.nodes:
            self._receive(address, conn)
        if errors:
            raise errors[0]
        return results

    def close(self):
        for _, conn, process in self.nodes:
            try:
                conn.send(None)
            except (BrokenPipeError, OSError):
                pass
            process.join(10)
            if process.is_alive():
                process.kill()
                process.join(5)


def check(reference_result, distributed_losses, distributed_values, rtol=2e-4, atol=2e-5):
    ref_losses, ref_values = reference_result
    for step, (want, got) in enumerate(zip(ref_losses, distributed_losses)):
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg="per-example losses, step {}".format(step))
    for i, (want, got) in enumerate(zip(ref_values, distributed_values)):
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg="variable {}".format(i))

"""Run one equivalence case: single-device reference, and one node of a distributed job.

Distributed cases go through the public API: ``AutoDist(spec, builder,
job=JobContext(...))`` attached to the TensorFlow servers of a ``NodePool``,
which outlive a test (starting TensorFlow costs seconds per process), each case
a job of its own (own job id, container and collective keys).
"""
import collections
import importlib
import itertools
import multiprocessing
import os
import signal
import time
import traceback
import uuid
from multiprocessing import connection

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


def _die_with_parent():
    """This process ends when the one that made the pool does, however it ends (a test process or an xdist worker
    killed mid-case would otherwise leave its nodes waiting in a collective for ever, busy)."""
    import ctypes
    import signal
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG (Linux)


def _output_to(path):
    """This process's stdout and stderr, Python's and TensorFlow's C++ logs alike, go to ``path`` (the pool reports
    its tail if the node dies)."""
    import sys
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _answer(address, servers, chief, spec_path, message):
    if message[0] == "reset":
        reset(message[1], "grpc://" + servers[address])
        return None
    case, rows = message   # a case names the module whose run_node it runs (default: this one's, the graph-mode cases)
    import keras
    # every case names its layers as a fresh process would, as the chief's node does (free_memory: no gc.collect,
    # half a second in a process holding TensorFlow graphs)
    keras.backend.clear_session(free_memory=False)
    run = importlib.import_module(case["module"]).run_node if "module" in case else run_node
    return run(case, address, servers, chief, spec_path, rows)


def node_process(conn, address, servers, chief, cpus, spec_path, models_dir, log_path=None):
    """A long-lived node: starts its server, then runs the cases it is sent until told to stop."""
    import sys
    _die_with_parent()
    if log_path is not None:
        _output_to(log_path)
    sys.path.insert(0, models_dir)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from autodist.spec.cluster import node_config, start_server
    addresses = sorted(servers)
    server = start_server({"worker": [servers[a] for a in addresses]}, addresses.index(address),
                          node_config(cpus, addresses.index(chief), threads=2))
    conn.send(("ready", None))
    for message in iter(conn.recv, None):
        try:
            conn.send(("ok", _answer(address, servers, chief, spec_path, message)))
        except BaseException:  # reported to the test, which fails with it
            conn.send(("error", traceback.format_exc()))
    del server


class NodeDied(RuntimeError):
    """A pool's node process ended (crashed, killed, out of memory): its pool is closed, and the next
    ``pools(topology)`` starts that topology's nodes again."""


def _tail(path, lines=40):
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - 16384))
            return "\n".join(f.read().decode("utf-8", "replace").splitlines()[-lines:])
    except OSError as e:
        return "(no output: {})".format(e)


def _ending(exitcode):
    if exitcode is None:
        return "no exit status yet"
    if exitcode < 0:
        return "signal {} ({})".format(-exitcode, signal.Signals(-exitcode).name)
    return "exit status {}".format(exitcode)


Node = collections.namedtuple("Node", "address conn process log")


class NodePool:
    """Long-lived node processes of one topology (chief first), each writing its output to ``<log_dir>/<address>.log``.

    A node that ends, or stays silent for ``timeout`` s, fails the case it was in (``NodeDied`` with its exit status
    and the tail of its output; ``TimeoutError`` naming it) and closes the pool: ``alive`` is then False, and the
    session's ``pools`` fixture starts a new one for the next test (tests/equivalence/conftest.py).
    """

    def __init__(self, nodes, spec_path, models_dir, timeout=240.0, log_dir=None):
        from autodist.runner import free_ports
        ports = free_ports(count=len(nodes))
        self.servers = {address: "{}:{}".format(address, port) for (address, _), port in zip(nodes, ports)}
        self.chief = nodes[0][0]
        self.timeout = timeout
        self.closed = False
        log_dir = log_dir or os.path.dirname(os.path.abspath(spec_path))
        ctx = multiprocessing.get_context("spawn")
        self.nodes = []
        for address, cpus in nodes:
            parent, child = ctx.Pipe()
            log = os.path.join(log_dir, "{}.log".format(address))
            process = ctx.Process(target=node_process, daemon=True,
                                  args=(child, address, self.servers, self.chief, cpus, spec_path, models_dir, log))
            process.start()
            self.nodes.append(Node(address, parent, process, log))
        self._answers("its start")

    @property
    def alive(self):
        """Not closed, and every node process running (one may also die between cases)."""
        return not self.closed and all(node.process.is_alive() for node in self.nodes)

    def ended(self):
        """The nodes that are no longer running, as "<address> (pid <pid>, <how it ended>)"."""
        return ["{} (pid {}, {})".format(node.address, node.process.pid, _ending(node.process.exitcode))
                for node in self.nodes if not node.process.is_alive()]

    def _died(self, node, during):
        node.process.join(5)
        self.close(grace=0)
        return NodeDied("pool node {} (pid {}) ended during {} with {}; the last lines of its output ({}):\n{}".format(
            node.address, node.process.pid, during, _ending(node.process.exitcode), node.log, _tail(node.log)))

    def _send(self, messages, during):
        if self.closed:
            raise RuntimeError("the pool of {} was closed (a node died or timed out before {})".format(
                ", ".join(node.address for node in self.nodes), during))
        for node in self.nodes:
            try:
                node.conn.send(messages(node))
            except OSError as e:  # BrokenPipeError: the node is gone
                raise self._died(node, during) from e

    def _answers(self, during, timeout=None):
        """{address: (status, value)} of every node; fails at once when a node ends instead of answering."""
        timeout = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        pending, answers = {node.conn: node for node in self.nodes}, {}
        while pending:
            waited = [node.process.sentinel for node in pending.values()] + list(pending)
            if not connection.wait(waited, max(0.0, deadline - time.monotonic())):
                self.close(grace=0)
                failed = "".join("\nnode {} had failed:\n{}".format(address, value)
                                 for address, (status, value) in sorted(answers.items()) if status == "error")
                raise TimeoutError("pool node(s) {} did not answer within {:.0f} s during {}{}".format(
                    ", ".join(node.address for node in pending.values()), timeout, during, failed))
            for conn, node in list(pending.items()):
                if conn.poll(0):
                    try:
                        answers[node.address] = conn.recv()
                        del pending[conn]
                        continue
                    except EOFError:
                        pass
                elif node.process.is_alive():
                    continue
                raise self._died(node, during)
        return answers

    def run(self, case, rows):
        """Send ``case`` to every node (``rows[address]`` = its slice of the batch); return their results
        (waiting ``case["timeout"]`` s for them, if the case sets it, else the pool's timeout)."""
        during = "case {} ({} on {})".format(case["job_id"], case.get("builder"), case.get("model"))
        self._send(lambda node: (case, rows[node.address]), during)
        answers = self._answers(during, case.get("timeout"))
        self._send(lambda node: ("reset", case["job_id"]), "the reset after " + during)
        resets = self._answers("the reset after " + during)
        for replies, what in ((answers, during), (resets, "the reset after " + during)):
            for node in self.nodes:
                status, value = replies[node.address]
                if status == "error":
                    raise RuntimeError("node {} failed in {}:\n{}".format(node.address, what, value))
        return [answers[node.address][1] for node in self.nodes]

    def close(self, grace=60.0):
        """Stop the nodes: each gets ``grace`` s to end its server and write its coverage data, then is killed
        (0 after a node died or timed out: the others are still in that case, not reading)."""
        self.closed = True
        for node in self.nodes:
            try:
                node.conn.send(None)
            except OSError:
                pass
            node.process.join(grace)
            if node.process.is_alive():
                node.process.kill()
                node.process.join(5)


def assert_all_close(got, want, what, rtol=2e-4, atol=2e-5):
    """``got[i]`` equals ``want[i]`` for every ``i``, and there are as many of each: a node that returns fewer
    steps or variables than the reference fails (``zip`` alone would stop at the shorter)."""
    got, want = list(got), list(want)
    assert len(got) == len(want), "{}: {} of them, the reference has {}".format(what, len(got), len(want))
    for i, (expected, actual) in enumerate(zip(want, got)):
        np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, err_msg="{} {}".format(what, i))


#: float32 sums taken in another order (per replica, then across replicas and nodes) through STEPS steps, some of
#: Adam, whose normalization turns the rounding of a small gradient into a larger change of its step
def check(reference_result, distributed_losses, distributed_values, rtol=2e-4, atol=2e-5):
    ref_losses, ref_values = reference_result
    assert_all_close(distributed_losses, ref_losses, "per-example losses of step", rtol, atol)
    assert_all_close(distributed_values, ref_values, "variable", rtol, atol)

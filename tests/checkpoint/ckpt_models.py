"""Models and runners shared by the checkpoint tests (single-device reference and distributed runs)."""
import numpy as np
import tensorflow as tf

from autodist import AutoDist
from autodist.checkpoint import Saver

BATCH = 16
STEPS = 3   # k: the tests run k steps, save, restore and run k more, against 2k single-device steps


def write_spec(directory, cpus=2):
    path = directory / "spec_{}cpus.yml".format(cpus)
    path.write_text("nodes:\n  - address: 127.0.0.1\n    cpus: [{}]\n".format(", ".join(str(i) for i in range(cpus))))
    return str(path)


class Dense:
    """y = relu(x W + b) V, squared error, Adam: slots and beta powers to save."""

    features = 5

    def __init__(self, seed=0):
        rng = np.random.RandomState(seed)
        self.x = rng.randn(2 * STEPS, BATCH, self.features).astype(np.float32)
        self.y = rng.randn(2 * STEPS, BATCH, 1).astype(np.float32)

    def build(self):
        x = tf.compat.v1.placeholder(tf.float32, [None, self.features], name="x")
        y = tf.compat.v1.placeholder(tf.float32, [None, 1], name="y")
        w = tf.Variable(tf.random.stateless_normal([self.features, 4], seed=[1, 2]), name="W")
        b = tf.Variable(tf.fill([4], 0.1), name="b")
        v = tf.Variable(tf.random.stateless_normal([4, 1], seed=[3, 4]), name="V")
        prediction = tf.matmul(tf.nn.relu(tf.matmul(x, w) + b), v, name="prediction")
        loss = tf.reduce_mean(tf.square(prediction - y))
        train = tf.compat.v1.train.AdamOptimizer(0.05).minimize(loss)
        return {"x": x, "y": y, "prediction": prediction, "loss": loss, "train": train}

    def feed(self, model, step):
        return {model["x"]: self.x[step], model["y"]: self.y[step]}


class Wide(Dense):
    """A first layer above PartitionedAR's 4 MiB threshold: split into two shards (with its Adam slots)."""

    features = 2100

    def build(self):
        x = tf.compat.v1.placeholder(tf.float32, [None, self.features], name="x")
        y = tf.compat.v1.placeholder(tf.float32, [None, 1], name="y")
        e = tf.Variable(tf.random.stateless_normal([self.features, 512], seed=[1, 2]) * 0.01, name="E")
        v = tf.Variable(tf.fill([512, 1], 0.1), name="V")
        prediction = tf.matmul(tf.matmul(x, e), v, name="prediction")
        loss = tf.reduce_mean(tf.square(prediction - y))
        train = tf.compat.v1.train.AdamOptimizer(0.01).minimize(loss)
        return {"x": x, "y": y, "prediction": prediction, "loss": loss, "train": train}


def state(session, graph):
    """{op name: value} of every global variable (run through ``session``)."""
    variables = graph.get_collection(tf.compat.v1.GraphKeys.GLOBAL_VARIABLES)
    return dict(zip([v.op.name for v in variables], session.run(variables)))


def single_device(problem, steps):
    """Values of every variable after ``steps`` plain single-device steps on the global batch."""
    graph = tf.Graph()
    with graph.as_default():
        model = problem.build()
        with tf.compat.v1.Session(graph=graph) as session:
            session.run(tf.compat.v1.global_variables_initializer())
            for step in steps:
                session.run(model["train"], problem.feed(model, step))
            return state(session, graph)


def distributed(spec, builder, problem, steps, restore=None, save=None, saver_kwargs=None):
    """Train ``steps`` under ``builder`` (after restoring ``restore``), save to ``save``; returns (state, path)."""
    ad = AutoDist(spec, builder)
    graph = tf.Graph()
    with graph.as_default(), ad.scope():
        model = problem.build()
        saver = Saver(**(saver_kwargs or {}))
        session = ad.create_distributed_session()
        if restore is not None:
            saver.restore(session, restore)
        for step in steps:
            session.run(model["train"], problem.feed(model, step))
        path = saver.save(session, save, global_step=len(steps)) if save is not None else None
        return state(session, graph), path, session, saver


def assert_same_state(expected, actual, atol=1e-5):
    assert sorted(expected) == sorted(actual)
    for name in expected:
        np.testing.assert_allclose(actual[name], expected[name], atol=atol, rtol=1e-5, err_msg=name)

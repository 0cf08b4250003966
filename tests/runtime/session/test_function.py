"""autodist.runtime.session.function: traced once per signature, fed and run after; equals single-device training.

The reference runs the same Python step function in a plain graph (with the
optimizer capture that orders Keras 3 updates) on the global batch; the
distributed function runs on two CPU replicas, each taking half the batch.
"""
import keras
import numpy as np
import pytest
import tensorflow as tf

from autodist import AutoDist
from autodist.checkpoint import Saver
from autodist.capture.optimizers import capture_optimizers
from autodist.errors import FunctionError
from autodist.capture.graph_item import GraphItem
from autodist.strategies import PS, AllReduce

BATCH, FEATURES, CLASSES = 16, 4, 3


@pytest.fixture(scope="module")
def data():
    rng = np.random.RandomState(0)
    return (rng.randn(6, BATCH, FEATURES).astype(np.float32),
            rng.randint(0, CLASSES, size=(6, BATCH)).astype(np.int32))


def _model():
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(8, activation="relu", name="hidden"),
                              keras.layers.Dense(CLASSES, name="logits")])
    return model, keras.optimizers.Adam(0.05)


def _steps(model, optimizer):
    def train_step(x, y):
        with tf.GradientTape() as tape:
            per_example = keras.losses.sparse_categorical_crossentropy(y, model(x, training=True), from_logits=True)
            loss = tf.reduce_mean(per_example)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return per_example

    def predict(x):
        return model(x, training=False)
    return train_step, predict


def _reference(data, train_steps, predict_after):
    """Per-example losses of each step and predictions of x[-1] after ``predict_after`` steps, single device."""
    x, y = data
    graph = tf.Graph()
    item = GraphItem(graph=graph)
    with graph.as_default(), capture_optimizers(), item.as_default():
        train_step, predict = _steps(*_model())
        xs = tf.compat.v1.placeholder(tf.float32, [None, FEATURES])
        ys = tf.compat.v1.placeholder(tf.int32, [None])
        losses = train_step(xs, ys)
        train_ops = list(item.train_op_names)
        outputs = predict(xs)
        with tf.compat.v1.Session(graph=graph) as session:
            session.run(tf.compat.v1.global_variables_initializer())
            per_step, predictions = [], None
            for step in range(train_steps):
                if step == predict_after:
                    predictions = session.run(outputs, {xs: x[-1]})
                per_step.append(session.run([losses] + train_ops, {xs: x[step], ys: y[step]})[0])
    return per_step, predictions


@pytest.mark.parametrize("builder", [AllReduce(), PS()], ids=["AllReduce", "PS"])
def test_train_then_predict_equals_single_device(spec, data, builder):
    """Two functions; the second is traced after the session exists, so the values move to a new one."""
    x, y = data
    expected, expected_predictions = _reference(data, 5, predict_after=3)
    keras.backend.clear_session(free_memory=False)
    ad = AutoDist(spec, builder)
    with tf.Graph().as_default(), ad.scope():
        model, optimizer = _model()
    train_step, predict = (ad.function(f) for f in _steps(model, optimizer))
    losses = [train_step(x[step], y[step]) for step in range(3)]
    first_session = ad.session
    predictions = predict(x[-1])
    assert ad.session is not first_session           # the grown graph runs in a new session
    losses += [train_step(x[step], y[step]) for step in range(3, 5)]
    for got, want in zip(losses, expected):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(predictions, expected_predictions, rtol=1e-5, atol=1e-6)


def test_cache_is_keyed_by_function_shapes_and_dtypes(spec, data):
    x, y = data
    keras.backend.clear_session(free_memory=False)
    ad = AutoDist(spec, AllReduce())
    with tf.Graph().as_default(), ad.scope():
        model, optimizer = _model()
    train_step, predict = (ad.function(f) for f in _steps(model, optimizer))
    train_step(x[0], y[0])
    graph = ad.graph_item.graph
    version = graph.version
    train_step(x[1], y[1])
    train_step(x[2][:6], y[2][:6])                    # another batch size: same trace
    assert train_step.traces == 1 and graph.version == version
    predict(x[0])
    predict(x[0].astype(np.float64))                  # another dtype: a new trace
    assert predict.traces == 2 and train_step.traces == 1
    out = predict(x[0][:5])
    assert out.shape == (5, CLASSES) and predict.traces == 2


def test_python_constants_are_part_of_the_signature_and_scalars_are_fed(spec, data):
    x, _ = data
    ad = AutoDist(spec, AllReduce())
    with tf.Graph().as_default(), ad.scope():
        w = tf.Variable(np.ones([FEATURES, 1], np.float32), name="w")
        opt = tf.compat.v1.train.GradientDescentOptimizer(0.0)

    @ad.function
    def train(features):
        opt.minimize(tf.reduce_sum(tf.matmul(features, w)), var_list=[w])

    @ad.function
    def apply(features, scale, double=False):
        out = tf.matmul(features, w) * scale
        return {"out": out * 2.0 if double else out, "flag": double}

    train(x[0])
    single = apply(x[0], np.float32(3.0))
    doubled = apply(x[0], np.float32(3.0), double=True)
    assert apply.traces == 2 and single["flag"] is False and doubled["flag"] is True
    np.testing.assert_allclose(single["out"], x[0] @ np.ones([FEATURES, 1]) * 3.0, rtol=1e-5)
    np.testing.assert_allclose(doubled["out"], 2 * single["out"], rtol=1e-5)
    np.testing.assert_allclose(apply(x[0], np.float32(0.5))["out"], single["out"] / 6.0, rtol=1e-5)


def test_writes_nothing_depends_on_run_in_every_replica(spec, data):
    """Like tf.function: a state update the function does not return still runs, once per replica."""
    x, _ = data
    ad = AutoDist(spec, AllReduce())
    with tf.Graph().as_default(), ad.scope():
        w = tf.Variable(np.ones([FEATURES, 1], np.float32), name="w")
        rows = tf.Variable(0.0, trainable=False, name="rows_seen")
        opt = tf.compat.v1.train.GradientDescentOptimizer(0.1)

    @ad.function
    def step(features):
        rows.assign_add(tf.cast(tf.shape(features)[0], tf.float32))
        opt.minimize(tf.reduce_mean(tf.matmul(features, w)), var_list=[w])

    assert step(x[0]) is None
    step(x[1])
    session = ad.session
    copies = ["AutoDist-Replica-{}/rows_seen".format(i) for i in range(2)]
    values = session._session.run([session.distributed_graph.get_tensor_by_name(c + "/Read/ReadVariableOp:0")
                                   for c in copies])
    assert values == [BATCH, BATCH]                   # each replica counted its own half, twice


def test_bad_arguments_and_retraining_are_refused(spec, data):
    x, y = data
    keras.backend.clear_session(free_memory=False)
    ad = AutoDist(spec, AllReduce())
    with tf.Graph().as_default(), ad.scope():
        model, optimizer = _model()
    train_step, _ = (ad.function(f) for f in _steps(model, optimizer))
    with pytest.raises(FunctionError, match="numpy arrays"):
        train_step(object(), y[0])
    with pytest.raises(FunctionError, match="callable"):
        ad.function(42)
    train_step(x[0], y[0])
    with pytest.raises(FunctionError, match="applies gradients"):
        train_step(x[0].astype(np.float64), y[0])     # a new trace of the same training step


def test_a_saver_follows_the_session_the_functions_run_in(spec, data, tmp_path):
    x, y = data
    keras.backend.clear_session(free_memory=False)
    ad = AutoDist(spec, PS())
    with tf.Graph().as_default(), ad.scope():
        model, optimizer = _model()
        saver = Saver()                               # before the optimizer has created its variables
    train_step, predict = (ad.function(f) for f in _steps(model, optimizer))
    train_step(x[0], y[0])
    first = saver.save(ad.session, str(tmp_path / "model"), global_step=1)
    predict(x[0])                                     # a new session for the grown graph
    train_step(x[1], y[1])
    second = saver.save(ad.session, str(tmp_path / "model"), global_step=2)
    assert saver.last_checkpoints == [first, second]
    saved = dict(tf.train.list_variables(second))
    assert any(name.endswith("iteration") for name in saved)          # Keras optimizer state is included
    reader = tf.train.load_checkpoint(second)
    for variable in model.weights:
        name = variable.value.op.name
        np.testing.assert_array_equal(reader.get_tensor(name), ad.session.run(variable.value))
    assert reader.get_tensor(next(n for n in saved if n.endswith("iteration"))) == 2


def test_a_function_can_be_traced_before_it_runs(spec, data):
    """Evaluating before training: the training step is traced first, so one session serves both."""
    x, y = data
    keras.backend.clear_session(free_memory=False)
    ad = AutoDist(spec, AllReduce())
    with tf.Graph().as_default(), ad.scope():
        model, optimizer = _model()
    train_step, predict = (ad.function(f) for f in _steps(model, optimizer))
    with pytest.raises(FunctionError, match="trace"):
        predict(x[0])                                 # no gradients yet: no session can start
    train_step.trace(x[0], y[0])
    before = predict(x[0])
    session = ad.session
    train_step(x[0], y[0])
    assert ad.session is session and not np.allclose(predict(x[0]), before)

"""tf.data pipelines made inside the scope: automatic sharding, the look-ahead of uneven inputs, and what is refused.

Sharding is checked where it happens (a node's iterator in a plain session, as
node 1 of 2); uneven inputs on one node of two replicas, whose one iterator
runs out in the middle of a step (5 batches, 2 per step): ``join`` trains the
last batch alone, ``end`` stops before it, both as one device on those rows.
The two-node matrix is ``tests/equivalence/test_uneven_inputs_equivalence.py``.
"""
import numpy as np
import pytest
import tensorflow as tf

from autodist import AutoDist
from autodist.capture.datasets import capture_datasets
from autodist.capture.graph_item import GraphItem
from autodist.capture.optimizers import capture_optimizers
from autodist.capture.datasets.uneven import with_lookahead
from autodist.errors import CaptureError, TransformError
from autodist.strategies import PS, AllReduce

tf1 = tf.compat.v1
RS = np.random.RandomState(0)
X, Y = RS.randn(10, 3).astype(np.float32), RS.randn(10, 1).astype(np.float32)


def _read_all(dataset_fn, **options):
    with tf.Graph().as_default():
        with capture_datasets(**options):
            get_next = tf1.data.make_one_shot_iterator(dataset_fn()).get_next()
        with tf1.Session() as sess:
            out = []
            while len(out) < 100:
                try:
                    out.append(sess.run(get_next).tolist())
                except tf.errors.OutOfRangeError:
                    return out
    raise AssertionError("endless")


def test_auto_shard_reads_a_nodes_files_or_every_nth_element(tmp_path):
    for i in range(4):
        (tmp_path / "part-{}.txt".format(i)).write_text("".join("{}\n".format(10 * i + j) for j in range(3)))

    def lines():
        files = tf.data.Dataset.list_files(str(tmp_path / "*.txt"), shuffle=False)
        return files.interleave(tf.data.TextLineDataset, cycle_length=1).batch(2)

    node_1_of_2 = dict(num_workers=2, worker_index=1)
    # files 1 and 3 / every other batch of the lines of all files
    assert _read_all(lines, auto_shard="auto", **node_1_of_2) == [[b"10", b"11"], [b"12", b"30"], [b"31", b"32"]]
    assert _read_all(lambda: tf.data.Dataset.range(7).batch(2), auto_shard="auto", **node_1_of_2) == [[2, 3], [6]]
    assert _read_all(lines, auto_shard="data", **node_1_of_2) == [[b"2", b"10"], [b"20", b"21"], [b"31", b"32"]]
    assert len(_read_all(lines, auto_shard=None, **node_1_of_2)) == 6   # off: the whole input
    with pytest.raises(CaptureError, match="auto_shard must be one of off, auto, file, data"):
        _read_all(lines, auto_shard="files", **node_1_of_2)


def _sharded(dataset_fn, policy, graph_seed=None):
    from autodist.capture.datasets.sharding import shard_for_node
    with tf.Graph().as_default():
        if graph_seed is not None:
            tf1.set_random_seed(graph_seed)
        return shard_for_node(dataset_fn(), policy, 2, 0)


def test_sharding_refuses_a_shuffle_without_a_seed_where_it_shards_after_it(tmp_path):
    # each node would shuffle in its own order: shards overlap and miss elements (before: silently)
    (tmp_path / "a.txt").write_text("1\n")

    def files(shuffle):
        return tf.data.Dataset.list_files(str(tmp_path / "*.txt"), shuffle=shuffle)

    def records(seed=None):
        return files(False).interleave(tf.data.TextLineDataset, cycle_length=1).shuffle(4, seed=seed)

    def numbers(seed=None):
        return tf.data.Dataset.range(8).shuffle(4, seed=seed).batch(2)
    for fn, policy in ((numbers, "data"), (numbers, "auto"), (records, "data"), (lambda: files(True), "file"),
                       (lambda: files(True).interleave(tf.data.TextLineDataset), "auto")):
        with pytest.raises(CaptureError, match=r"auto_shard='{}': the input pipeline shuffles without a seed \(op "
                                               r"'.*ShuffleDataset.*'\)".format(policy)):
            _sharded(fn, policy)
    _sharded(lambda: numbers(seed=3), "data")      # seeded: the same order on every node
    _sharded(numbers, "data", graph_seed=7)        # a graph seed seeds it too
    _sharded(records, "file")                      # the files are sharded, their records shuffled: fine
    with pytest.warns(UserWarning, match="shuffles its records without a seed"):
        _sharded(records, "auto")                  # fine by files; by elements (fewer files than nodes) it is not


def test_lookahead_counts_the_replicas_with_data_in_the_next_step():
    with tf.Graph().as_default():
        get_next = tf1.data.make_one_shot_iterator(with_lookahead(
            tf.data.Dataset.range(5).batch(2), depth=2)).get_next()
        with tf1.Session() as sess:
            seen = [sess.run(get_next) for _ in range(5)]
    assert [e.tolist() for e, _, _ in seen] == [[0, 1], [2, 3], [4], [4], [4]]   # after the end: the last, 0 rows
    assert [float(r) for _, r, _ in seen] == [2, 2, 1, 0, 0]
    assert [float(f) for _, _, f in seen] == [1, 0, 0, 0, 0]   # the element two places on exists


def _reference(steps, epochs=1):
    with tf.Graph().as_default():
        x, y = tf1.placeholder(tf.float32, [None, 3]), tf1.placeholder(tf.float32, [None, 1])
        w = tf1.get_variable("w", initializer=tf.constant([[0.1], [0.2], [0.3]]))
        train = tf1.train.AdamOptimizer(0.1).minimize(tf.reduce_mean(tf.square(x @ w - y)))
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            for _ in range(epochs):
                for rows in steps:
                    sess.run(train, {x: X[rows], y: Y[rows]})
            return sess.run(w)


def _train(spec, builder, policy, epochs=1, **options):
    ad = AutoDist(spec, builder, uneven_inputs=policy, **options)
    with tf.Graph().as_default(), ad.scope():
        dataset = tf.data.Dataset.from_tensor_slices((X, Y)).batch(2)
        iterator = tf1.data.make_initializable_iterator(dataset)
        x, y = iterator.get_next()
        w = tf1.get_variable("w", initializer=tf.constant([[0.1], [0.2], [0.3]]))
        train = tf1.train.AdamOptimizer(0.1).minimize(tf.reduce_mean(tf.square(x @ w - y)))
        sess = ad.create_distributed_session()
        steps = []
        for _ in range(epochs):
            sess.run(iterator.initializer)   # also sets the input's state back: a new epoch
            count = 0
            with pytest.raises(tf.errors.OutOfRangeError, match="the epoch has ended for every node"):
                while count < 10:
                    sess.run(train)
                    count += 1
            steps.append(count)
        return steps, sess.run(w)


@pytest.mark.parametrize("builder", [AllReduce(), PS()], ids=["AllReduce", "PS"])
def test_join_trains_the_last_batch_alone_and_end_stops_before_it(spec, builder):
    steps, w = _train(spec, builder, "join", epochs=2)
    assert steps == [3, 3]
    np.testing.assert_allclose(w, _reference([slice(0, 4), slice(4, 8), slice(8, 10)], epochs=2), rtol=1e-5)
    steps, w = _train(spec, builder, "end")
    assert steps == [2]
    np.testing.assert_allclose(w, _reference([slice(0, 4), slice(4, 8)]), rtol=1e-5)


def test_uneven_inputs_refuse_what_they_cannot_weigh(spec):
    with pytest.raises(TransformError, match="cannot be combined with gradient accumulation"):
        _train(spec, AllReduce(), "join", accumulation_steps=2)
    with pytest.raises(TransformError, match="needs synchronous training"):
        _train(spec, PS(sync=False), "end")
    with pytest.raises(CaptureError, match="uneven_inputs must be None"):
        AutoDist(spec, AllReduce(), uneven_inputs="first")
    ad = AutoDist(spec, AllReduce(), uneven_inputs="end")
    with tf.Graph().as_default(), ad.scope():
        dataset = tf.data.Dataset.from_tensor_slices((X, Y)).batch(2)
        iterator = tf1.data.Iterator.from_structure(tf1.data.get_output_types(dataset),
                                                    tf1.data.get_output_shapes(dataset))
        x, y = iterator.get_next()
        w = tf1.get_variable("w", [3, 1])
        tf1.train.GradientDescentOptimizer(0.1).minimize(tf.reduce_mean(tf.square(x @ w - y)))
        with pytest.raises(CaptureError, match="an iterator made otherwise"):
            ad.create_distributed_session()


def test_iterator_creation_is_tensorflows_again_after_the_scope(spec):
    from tensorflow.python.data.ops.dataset_ops import DatasetV1
    before = DatasetV1.__dict__["_make_one_shot_iterator"]
    ad = AutoDist(spec, AllReduce(), uneven_inputs="join", auto_shard="data")
    with pytest.raises(RuntimeError, match="inside"):
        with tf.Graph().as_default(), ad.scope():
            assert DatasetV1.__dict__["_make_one_shot_iterator"] is not before
            raise RuntimeError("inside")
    assert DatasetV1.__dict__["_make_one_shot_iterator"] is before


def _half_step(x, y):
    """A mixed_float16 Dense under a LossScaleOptimizer whose scaled gradient is 49152, finite in float16 (the
    policy is set by the caller): (train op, kernel, loss scale)."""
    import keras
    layer = keras.layers.Dense(4, use_bias=False, kernel_initializer="zeros")
    optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(1e-4), initial_scale=2.0 ** 17)
    out = tf.cast(layer(x), tf.float32)
    optimizer.build(layer.trainable_variables)
    loss = optimizer.scale_loss(tf.reduce_mean(tf.square(out - y)))
    weights = [v.value for v in layer.trainable_variables]
    train = optimizer.apply_gradients(zip(tf.gradients(loss, weights), layer.trainable_variables))
    return train, weights[0], optimizer.dynamic_scale.value


@pytest.mark.parametrize("builder", [AllReduce(), PS()], ids=["AllReduce", "PS"])
def test_uneven_inputs_under_loss_scaling_skip_no_step_one_device_takes(spec, builder):
    """Uneven inputs weigh a gradient by its replica's rows (8 here) before the synchronization: in float16 that
    product (8 x 49152 / 2) overflows where the one device's gradient does not, so these gradients travel in
    float32 and the job takes both steps, at the initial scale, as one device does."""
    import keras
    x, y = np.ones((32, 3), np.float32), np.full((32, 4), -0.75, np.float32)
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        with tf.Graph().as_default() as graph:
            with capture_optimizers(), GraphItem(graph).as_default():   # Keras' update as one ordered train op
                xs, ys = tf1.placeholder(tf.float32, [None, 3]), tf1.placeholder(tf.float32, [None, 4])
                train, kernel, scale = _half_step(xs, ys)
            with tf1.Session() as sess:
                sess.run(tf1.global_variables_initializer())
                for rows in (slice(0, 16), slice(16, 32)):
                    sess.run(train, {xs: x[rows], ys: y[rows]})
                want = sess.run([kernel, scale])
        ad = AutoDist(spec, builder, uneven_inputs="end")
        with tf.Graph().as_default(), ad.scope():
            xs, ys = tf1.data.make_one_shot_iterator(tf.data.Dataset.from_tensor_slices((x, y)).batch(8)).get_next()
            train, kernel, scale = _half_step(xs, ys)
            sess = ad.create_distributed_session()
            with pytest.raises(tf.errors.OutOfRangeError):
                for _ in range(3):
                    sess.run(train)
            got = sess.run([kernel, scale])
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert got[1] == want[1] == 2.0 ** 17
    np.testing.assert_allclose(got[0], want[0], rtol=1e-3)

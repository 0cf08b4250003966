"""Gradient compressors, run: what goes over the wire, what is kept back, and how far training drifts.

Compressed training is not equal to the exact run; each compressor is held to
its own bound here. The models have gradients that do not depend on the
variables (loss = <mean of the replica's batch, W>), so a replica's gradient
is known from its feed and the exact run is ``W_t = W_0 - lr * t * G``.
"""
import numpy as np
import pytest
import tensorflow as tf

from autodist.plan.contract import Compressor
from autodist.kernel.synchronization import compressor as comp
from kernel_harness import AR, capture, device, make_strategy, nodes_by_name, tf1, transform

T0C0, T0C1 = device(0, 0), device(0, 1)
LR = 0.5
SHAPE = (3, 4)


def _model():
    x = tf1.placeholder(tf.float32, [None] + list(SHAPE), name="x")
    w = tf1.get_variable("W", initializer=tf.zeros(SHAPE))
    b = tf1.get_variable("b", initializer=tf.zeros([SHAPE[1]]))
    mean_x = tf.reduce_mean(x, 0)
    loss = tf.reduce_sum(mean_x * w) + tf.reduce_sum(tf.reduce_mean(mean_x, 0) * b)
    return {"train": tf1.train.GradientDescentOptimizer(LR).minimize(loss)}


def _feeds():
    """Per-replica batches whose means (the gradients of W) are full rank and not float16 numbers."""
    rs = np.random.RandomState(3)
    return [(rs.rand(2, *SHAPE).astype(np.float32) - 0.5) / 3 for _ in range(2)]


def _grads(feeds):
    return [f.mean(0) for f in feeds]


def _open(cluster, compressor, rank=0, b_compressor=None):
    item, _ = capture(_model)
    ar = {"W": dict(compressor=compressor, rank=rank),
          "b": dict(compressor=compressor if b_compressor is None else b_compressor, group=1)}
    result = transform(item, make_strategy([T0C0, T0C1], ar=ar))
    return result, cluster(1).open(result)


def _pass_variables(result):
    """Variables a pass created (compressor state): name -> (shape, device)."""
    found = {}
    for node in result.item.graph_def.node:
        if node.op == "VarHandleOp" and node.name.startswith("AutoDist-") and \
                not node.name.startswith("AutoDist-Replica-"):
            found[node.name] = (tuple(d.size for d in node.attr["shape"].shape.dim), node.device)
    return found


def _wire_dtypes(result):
    nodes = nodes_by_name(result.item.graph_def)
    # small uncompressed buckets are all-gathered (contract.GATHER_BYTES): those are on the wire too
    return sorted(tf.as_dtype(n.attr["T"].type).name for n in nodes.values()
                  if n.op in ("CollectiveReduceV2", "CollectiveGatherV2"))


def test_horovod_sends_float16_and_stays_within_rounding_of_the_exact_run(cluster):
    result, node = _open(cluster, AR.HorovodCompressor)
    assert _wire_dtypes(result) == ["float16"] * 4          # W and b, each on both replicas
    assert _pass_variables(result) == {}                    # no state: nothing is fed back
    feeds, steps = _feeds(), 4
    g16 = [g.astype(np.float16) for g in _grads(feeds)]
    sent_mean = (g16[0] + g16[1]).astype(np.float32) / 2     # summed in float16 on the wire
    exact = np.mean(_grads(feeds), 0)
    for step in range(1, steps + 1):
        node.train({"x:0": feeds})
        w = node.read("AutoDist-Replica-1/W")
        np.testing.assert_allclose(w, -LR * step * sent_mean, rtol=1e-6)
    drift = np.abs(w - (-LR * steps * exact))
    assert drift.max() > 0                                   # it really was compressed
    # each step: two roundings of the gradients and one of their sum, 2**-11 relative each
    bound = LR * steps * 2 ** -10 * np.abs(_grads(feeds)).max()
    assert drift.max() <= bound
    np.testing.assert_array_equal(node.read("AutoDist-Replica-0/W"), w)


def test_horovod_error_feedback_keeps_what_was_not_sent_in_a_variable(cluster):
    result, node = _open(cluster, AR.HorovodCompressorEF, b_compressor=AR.NoneCompressor)
    assert _wire_dtypes(result) == ["float16", "float16", "float32", "float32"]
    state = _pass_variables(result)
    residuals = sorted(name for name in state if "residual" in name)
    assert [state[n] for n in residuals] == [((12,), T0C0), ((12,), T0C1)]   # one per replica, W's size
    feeds = _feeds()
    grads = [g.reshape(-1) for g in _grads(feeds)]
    errors = [np.zeros(12, np.float32), np.zeros(12, np.float32)]
    applied = np.zeros(12, np.float32)
    for step in range(4):
        node.train({"x:0": feeds})
        sent = []
        for r in range(2):
            corrected = grads[r] + errors[r]
            sent.append(corrected.astype(np.float16))
            errors[r] = corrected - sent[r].astype(np.float32)
            got = node.read(residuals[r])
            np.testing.assert_allclose(got, errors[r], rtol=0, atol=1e-9)   # the residual is what was not sent
        applied += (sent[0] + sent[1]).astype(np.float32) / 2
        np.testing.assert_allclose(node.read("AutoDist-Replica-0/W").reshape(-1), -LR * applied, rtol=1e-6)
    # the residual persists: after several steps it is not the last step's rounding alone
    assert not np.allclose(errors[0], grads[0] - grads[0].astype(np.float16).astype(np.float32))
    # and error feedback keeps the sum of what was sent within one rounding of the exact sum
    exact = 4 * (grads[0] + grads[1]) / 2
    assert np.abs(-node.read("AutoDist-Replica-0/W").reshape(-1) / LR - exact).max() <= \
        np.abs(errors[0] + errors[1]).max() / 2 + 4 * 2 ** -11 * np.abs(exact).max()
    np.testing.assert_allclose(node.read("AutoDist-Replica-0/b"), node.read("AutoDist-Replica-1/b"))


def test_powersgd_low_rank_with_error_feedback_approaches_the_exact_run(cluster):
    rank, steps = 1, 12
    result, node = _open(cluster, AR.PowerSGDCompressor, rank=rank, b_compressor=AR.NoneCompressor)
    state = _pass_variables(result)
    assert sorted(state.values()) == sorted([((4, rank), T0C0), ((3, 4), T0C0), ((4, rank), T0C1), ((3, 4), T0C1)])
    errors = sorted(n for n, (shape, _) in state.items() if shape == SHAPE)
    qs = sorted(n for n, (shape, _) in state.items() if shape == (4, rank))
    feeds = _feeds()
    mean_grad = np.mean(_grads(feeds), 0)
    assert np.linalg.matrix_rank(mean_grad) == 3
    relative = []
    for step in range(1, steps + 1):
        node.train({"x:0": feeds})
        w = node.read("AutoDist-Replica-0/W")
        update = -w / LR                                       # the sum of every applied approximation
        if step == 1:
            assert np.linalg.matrix_rank(update, tol=1e-5) == rank
        residual = (node.read(errors[0]) + node.read(errors[1])) / 2
        # error feedback: what was applied plus what is held back is exactly the exact run's sum
        np.testing.assert_allclose(update + residual, step * mean_grad, rtol=1e-4, atol=1e-5)
        relative.append(np.linalg.norm(update - step * mean_grad) / np.linalg.norm(step * mean_grad))
        np.testing.assert_array_equal(node.read("AutoDist-Replica-1/W"), w)         # replicas agree
        np.testing.assert_array_equal(node.read(qs[0]), node.read(qs[1]))
    assert relative[0] > 0.2                                 # rank 1 of a rank-3 gradient: really compressed
    assert np.mean(relative[-4:]) < 0.5 * relative[0]        # the approximation error shrinks over steps


def test_powersgd_leaves_one_dimensional_tensors_uncompressed(cluster):
    steps = 3
    result, node = _open(cluster, AR.PowerSGDCompressor, rank=1)
    assert {shape for shape, _ in _pass_variables(result).values()} == {(4, 1), SHAPE}   # no state for b
    feeds = _feeds()
    for _ in range(steps):
        node.train({"x:0": feeds})
    b_grad = np.mean([f.mean((0, 1)) for f in feeds], 0)
    for prefix in ("AutoDist-Replica-0/", "AutoDist-Replica-1/"):
        np.testing.assert_allclose(node.read(prefix + "b"), -LR * steps * b_grad, rtol=1e-5)


def test_powersgd_rank_is_capped_by_the_matrix(cluster):
    result, node = _open(cluster, AR.PowerSGDCompressor, rank=8, b_compressor=AR.NoneCompressor)
    shapes = {shape for shape, _ in _pass_variables(result).values()}
    assert shapes == {(4, 3), SHAPE}                           # rank min(8, 3, 4) = 3
    node.train({"x:0": _feeds()})
    # full rank: the approximation is the mean itself
    np.testing.assert_allclose(node.read("AutoDist-Replica-0/W"), -LR * np.mean(_grads(_feeds()), 0),
                               rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("compressor", [Compressor.HorovodCompressor, Compressor.HorovodCompressorEF],
                         ids=["Horovod", "HorovodEF"])
def test_integer_gradients_are_sent_as_they_are(compressor):
    """Only floating gradients are compressed (structure only)."""
    graph = tf.Graph()
    with graph.as_default():
        class _Assignment:
            num_replicas, group_key, key_base = 2, 7, 700000
        collectives = comp.Collectives(_Assignment())
        _, steps, new_vars = comp.reduce_flat(collectives, tf.zeros([3], tf.int32), compressor, 1, "ring", "s")
    assert (steps, new_vars) == ([], [])
    reduce = [op for op in graph.get_operations() if op.type == "CollectiveReduceV2"]
    assert [op.get_attr("T") for op in reduce] == [tf.int32]


def test_the_all_reduce_spec_picks_nccl_on_gpus_only():
    """The spec is a communication hint: a ring on CPUs whatever it says (why Parallax's AUTO and AllReduce's NCCL
    build the same graph there: tests/dedupe.py), NCCL on GPUs unless it says RING."""
    import types
    from autodist.kernel.assignment import Replica
    from autodist.plan.contract import CollectiveSpec
    collectives = comp.Collectives(types.SimpleNamespace(key_base=100000))
    cpu, gpu = (Replica(0, 0, device(0, 0, kind), device(0)) for kind in ("CPU", "GPU"))
    assert {collectives.hint(cpu, spec) for spec in CollectiveSpec} == {"ring"}
    assert {spec.name: collectives.hint(gpu, spec) for spec in CollectiveSpec} == {
        "AUTO": "nccl", "NCCL": "nccl", "RING": "ring"}


def _scaled_model():
    """``_model`` under a Keras LossScaleOptimizer (dynamic loss scaling: a step whose gradients are not finite is
    skipped, its scale halved)."""
    import keras
    x = tf1.placeholder(tf.float32, [None] + list(SHAPE), name="x")
    w = keras.Variable(np.zeros(SHAPE, np.float32), name="W")
    b = keras.Variable(np.zeros(SHAPE[1], np.float32), name="b")
    optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(LR), initial_scale=8.0)
    optimizer.build([w, b])
    mean_x = tf.reduce_mean(x, 0)
    loss = optimizer.scale_loss(tf.reduce_sum(mean_x * w.value) + tf.reduce_sum(tf.reduce_mean(mean_x, 0) * b.value))
    train = optimizer.apply_gradients(zip(tf.gradients(loss, [w.value, b.value]), [w, b]))
    return {"train": train, "scale": optimizer.dynamic_scale.value.op.name, "weights": [w.value.op, b.value.op]}


@pytest.mark.parametrize("compressor", [Compressor.HorovodCompressor, Compressor.HorovodCompressorEF,
                                        Compressor.PowerSGDCompressor], ids=["Horovod", "HorovodEF", "PowerSGD"])
def test_an_overflow_skips_its_step_and_leaves_the_compressor_state_for_the_next(cluster, compressor):
    """An inf in one replica's gradient: every replica skips the step and halves its loss scale, the residual
    (or PowerSGD's error and Q) keeps the last finite step's value instead of taking an inf or NaN, and the
    next finite step trains (before, one overflow stopped training for good: every later step was skipped)."""
    item, built = capture(_scaled_model)
    names = {op.name.split("/")[0] for op in item.graph.get_operations() if op.type == "VarHandleOp"}
    w_op, b_op = sorted(n for n in names if n.startswith(("W", "b")))[::-1]
    result = transform(item, make_strategy([T0C0, T0C1], ar={w_op: dict(compressor=compressor, rank=1),
                                                             b_op: dict(compressor=compressor, group=1)}))
    node = cluster(1).open(result)
    state = sorted(_pass_variables(result))
    assert bool(state) == (compressor != Compressor.HorovodCompressor)
    feeds = _feeds()
    poisoned = [feeds[0], feeds[1].copy()]
    poisoned[1][0, 0, 0] = np.inf

    def read():
        return {n: node.read(n) for n in state + ["AutoDist-Replica-0/" + w_op, "AutoDist-Replica-1/" + w_op,
                                                  "AutoDist-Replica-0/" + built["scale"]]}
    node.train({"x:0": feeds})
    finite = read()
    node.train({"x:0": poisoned})
    skipped = read()
    for name, value in finite.items():
        if name.endswith(built["scale"]):
            assert skipped[name] == value / 2
        else:
            np.testing.assert_array_equal(skipped[name], value, err_msg=name)
    node.train({"x:0": feeds})
    trained = read()
    for name, value in trained.items():
        assert np.isfinite(value).all(), name
    assert np.abs(trained["AutoDist-Replica-0/" + w_op] - skipped["AutoDist-Replica-0/" + w_op]).max() > 0.01
    np.testing.assert_array_equal(trained["AutoDist-Replica-1/" + w_op], trained["AutoDist-Replica-0/" + w_op])

"""The distributed session: feeds split across replicas, fetches remapped, graph changes refused.

    feeds    a feed with an unknown dimension (the first None, wherever it is) is
             split evenly along it, replica 0 taking the first rows; other
             feeds go to every replica
    fetches  a fetch kept once is fetched as is; train ops run on every replica;
             outputs with an unknown dimension are concatenated in replica order;
             other values come from replica 0; variables give their synchronized value

``FetchMapper`` is checked on a transformed graph without a server; the
numbers come from one in-process session on one node with two CPU replicas
(Parallax: the dense variable all-reduced, mirrored on both replicas; the
embedding on a parameter server, kept once), shared by the tests below.
"""
import collections
import threading
import time

import numpy as np
import pytest
import tensorflow as tf

from autodist import AutoDist
from autodist.capture.optimizers import capture_optimizers
from autodist.errors import GraphChangedError, RemoteWorkerError, SessionError
from autodist.capture.graph_item import GraphItem
from autodist.kernel.graph_transformer import GraphTransformer
from autodist.kernel.assignment import NodeContext
from autodist.proto import strategy_pb2
from autodist.runtime.session.distributed import (CLOSE_GRACE, FetchMapper, WatchedCaller, await_failure, close_bounded,
                                                  flatten_fetches)
from autodist.runner.base import wait_until
from autodist.strategies import Parallax

tf1 = tf.compat.v1
LR = 0.1
W0 = np.array([[0.5], [-0.25], [1.0]], np.float32)
EMB0 = np.arange(6, dtype=np.float32).reshape(6, 1) / 10


def _model():
    x = tf1.placeholder(tf.float32, [None, 3], name="x")
    ids = tf1.placeholder(tf.int32, [None], name="ids")
    cols = tf1.placeholder(tf.float32, [2, None], name="cols")
    scale = tf1.placeholder(tf.float32, [], name="scale")
    w = tf1.get_variable("w", initializer=tf.constant(W0))
    emb = tf1.get_variable("emb", initializer=tf.constant(EMB0))
    per_example = (tf.matmul(x, w) * scale + tf.gather(emb, ids))[:, 0]
    loss = tf.reduce_mean(tf.square(per_example - 1.0))
    train = tf1.train.GradientDescentOptimizer(LR).minimize(loss)
    return dict(x=x, ids=ids, cols=cols, scale=scale, w=w, emb=emb, per_example=per_example, train=train,
                x_sum=tf.reduce_sum(x, name="x_sum"), cols_out=tf.identity(cols, name="cols_out"),
                cols_sum=tf.reduce_sum(cols, name="cols_sum"), scale_out=tf.identity(scale, name="scale_out"))


@pytest.fixture(scope="module")
def job(spec):
    """One distributed session for the module: (session, model tensors, the AutoDist object)."""
    ad = AutoDist(spec, Parallax())
    graph = tf.Graph()
    with graph.as_default(), ad.scope():
        model = _model()
        session = ad.create_distributed_session()
    yield session, model, ad
    session.close()


def _feed(model, rows, scale=1.0):
    rs = np.random.RandomState(rows)
    return {model["x"]: rs.rand(rows, 3).astype(np.float32), model["ids"]: np.arange(rows, dtype=np.int32) % 6,
            model["scale"]: scale}


def _forward(feed, model, w, emb):
    return (feed[model["x"]] @ w * feed[model["scale"]] + emb[feed[model["ids"]]])[:, 0]


# -- the session, run ---------------------------------------------------------------

def test_batch_feeds_are_split_in_replica_order(job):
    session, model, _ = job
    for rows in (4, 5):     # an odd batch: replica 0 takes the larger first part
        feed = _feed(model, rows, scale=3.0)
        per_example, x_sum, w, emb = session.run([model["per_example"], model["x_sum"], model["w"], model["emb"]],
                                                 feed)
        # concatenated in replica order: exactly the single-device forward pass, row by row
        np.testing.assert_allclose(per_example, _forward(feed, model, w, emb), rtol=1e-6)
        # a value of known shape comes from replica 0, which took the first rows
        np.testing.assert_allclose(x_sum, feed[model["x"]][:(rows + 1) // 2].sum(), rtol=1e-6)


def test_the_first_unknown_dimension_splits_wherever_it_is(job):
    session, model, _ = job
    cols = np.arange(12, dtype=np.float32).reshape(2, 6)
    out, total = session.run([model["cols_out"], model["cols_sum"]], {model["cols"]: cols})
    np.testing.assert_array_equal(out, cols)                    # concatenated back along axis 1
    assert total == cols[:, :3].sum()                           # replica 0 had the first three columns


def test_feeds_of_known_shape_reach_every_replica(job):
    session, model, _ = job
    feed = _feed(model, 4, scale=-2.0)
    assert session.run(model["scale_out"], feed) == -2.0
    per_example, w, emb = session.run([model["per_example"], model["w"], model["emb"]], feed)
    np.testing.assert_allclose(per_example[2:], _forward(feed, model, w, emb)[2:], rtol=1e-6)   # replica 1 too


def test_mapper_feeds_per_replica(job):
    session, model, _ = job
    mapper = session._mapper
    x = np.arange(15, dtype=np.float32).reshape(5, 3)
    fed = mapper.feed(model["x"], x)
    assert sorted(fed) == ["AutoDist-Replica-0/x:0", "AutoDist-Replica-1/x:0"]
    np.testing.assert_array_equal(fed["AutoDist-Replica-0/x:0"], x[:3])
    np.testing.assert_array_equal(fed["AutoDist-Replica-1/x:0"], x[3:])
    assert mapper.feed("scale:0", 2.0) == {"AutoDist-Replica-0/scale:0": 2.0, "AutoDist-Replica-1/scale:0": 2.0}
    with pytest.raises(SessionError, match="has 1 dimensions; its placeholder splits along dimension 1"):
        mapper.feed(model["cols"], np.zeros([2], np.float32))
    with pytest.raises(SessionError, match="cannot feed the op"):
        mapper.feed(model["train"], 1)


def test_a_calls_batch_is_its_first_split_feeds_size_along_the_split_axis(job):
    session, model, _ = job
    mapper = session._mapper
    assert mapper.rows(_feed(model, 5)) == 5                               # rows of x (or ids)
    assert mapper.rows({model["cols"]: np.zeros([2, 6], np.float32)}) == 6  # its split axis is 1
    assert mapper.rows({model["scale"]: 2.0}) == 0 and mapper.rows(None) == 0   # nothing split: no batch


def test_a_step_trains_every_replica_and_variables_give_their_synchronized_value(job):
    session, model, _ = job
    w_before, emb_before = session.run([model["w"], model["emb"]])
    feed = _feed(model, 4, scale=1.0)
    feed[model["ids"]] = np.array([0, 1, 4, 5], np.int32)
    assert session.run(model["train"], feed) is None
    # single-device SGD on the global batch: dense all-reduced, sparse rows of both replicas on the server
    residual = 2 * (_forward(feed, model, w_before, emb_before) - 1.0) / 4
    w_want = w_before - LR * (feed[model["x"]] * residual[:, None]).sum(0)[:, None]
    emb_want = emb_before.copy()
    np.add.at(emb_want[:, 0], feed[model["ids"]], -LR * residual)
    w_after, emb_after = session.run([model["w"], model["emb"]])
    np.testing.assert_allclose(w_after, w_want, rtol=1e-5)
    np.testing.assert_allclose(emb_after, emb_want, rtol=1e-5)     # rows 4, 5 came from replica 1
    raw = session._session.run(["AutoDist-Replica-0/w/Read/ReadVariableOp:0",
                                "AutoDist-Replica-1/w/Read/ReadVariableOp:0"])
    np.testing.assert_array_equal(raw[0], raw[1])                  # the mirrored copies agree
    np.testing.assert_array_equal(raw[0], w_after)


def test_the_monitor_counts_training_steps_apart_from_reads(job):
    session, model, _ = job
    monitor = session._monitor
    before = monitor.snapshot()
    feed = _feed(model, 4)
    for _ in range(3):   # the same signature three times: the ordinary path, then a cached plan
        session.run(model["train"], feed)
        session.run(model["w"])
    session.run([model["train"], model["per_example"]], feed)
    after = monitor.snapshot()
    assert after["steps"] - before["steps"] == 7
    assert after["sync"] - before["sync"] == 4   # the reads of w wait for nobody; the steps all-reduce


def test_fetch_mapping(job):
    session, model, _ = job
    mapper = session._mapper
    names, rebuild = mapper.fetch(model["train"])
    assert names == ["AutoDist-Replica-0/" + model["train"].name, "AutoDist-Replica-1/" + model["train"].name]
    assert rebuild([None, None]) is None
    emb_names, _ = mapper.fetch(model["emb"])
    assert emb_names == ["emb/Read/ReadVariableOp:0"]              # kept once: fetched as is
    w_names, _ = mapper.fetch(model["w"])
    assert w_names == ["AutoDist-Replica-0/w/Read/ReadVariableOp:0"]
    names, rebuild = mapper.fetch(model["cols_out"])
    assert len(names) == 2
    np.testing.assert_array_equal(rebuild([np.ones([2, 1]), np.zeros([2, 2])]), [[1, 0, 0], [1, 0, 0]])


def test_fetch_structures_are_kept(job):
    session, model, _ = job
    Pair = collections.namedtuple("Pair", "first second")
    feed = _feed(model, 2)
    got = session.run({"pair": Pair(model["scale_out"], [model["x_sum"]]), 7: model["scale_out"]}, feed)
    assert list(got) == ["pair", 7] and isinstance(got["pair"], Pair)
    assert got[7] == 1.0 and got["pair"].first == 1.0 and len(got["pair"].second) == 1
    call = session.make_callable([model["per_example"], model["x_sum"]], [model["x"], model["ids"], model["scale"]])
    per_example, _ = call(feed[model["x"]], feed[model["ids"]], 1.0)
    assert per_example.shape == (2,)
    with pytest.raises(SessionError, match="takes 3 feed values, got 1"):
        call(feed[model["x"]])
    with pytest.raises(SessionError, match="partial runs"):
        session.partial_run_setup([model["x_sum"]])


def test_changing_the_graph_after_the_session_is_a_clear_error_at_the_next_run(job):
    session, model, _ = job
    feed = _feed(model, 2)
    with session.graph.as_default():
        late = tf.identity(model["x"] * 2.0, name="late_double")
        late_feed = tf1.placeholder(tf.float32, [], name="late_feed")
    with pytest.raises(GraphChangedError) as error:
        session.run(late, feed)
    assert "'late_double'" in str(error.value) and "create_distributed_session()" in str(error.value)
    with pytest.raises(GraphChangedError, match="'late_feed'"):
        session.run(model["x_sum"], {**feed, late_feed: 1.0})
    # what existed before still runs
    assert session.run(model["x_sum"], feed) == pytest.approx(feed[model["x"]][:1].sum())


def test_names_the_distributed_graph_lacks(job):
    session, model, _ = job
    with pytest.raises(SessionError, match="cannot fetch or feed"):
        session.run("no_such_tensor:0")
    original = session.graph
    assignment = session.transform_result.assignment
    mapper = FetchMapper(original, tf.Graph(), assignment)
    with pytest.raises(SessionError, match="does not exist in the distributed graph"):
        mapper.fetch(model["x_sum"])


# -- FetchMapper on a transformed graph, no server ------------------------------------

def test_partitioned_variables_are_fetched_through_their_alias():
    graph = tf.Graph()
    with graph.as_default():
        item = GraphItem(graph)
        with capture_optimizers(), item.as_default():
            x = tf1.placeholder(tf.float32, [None, 4], name="x")
            w = tf1.get_variable("W", initializer=tf.ones([4, 1]))
            tf1.train.GradientDescentOptimizer(0.1).minimize(tf.reduce_sum(tf.matmul(x, w)))
        item.prepare()
    strategy = strategy_pb2.Strategy()
    strategy.graph_config.replicas.extend(["/job:worker/task:0/device:CPU:0", "/job:worker/task:0/device:CPU:1"])
    node = strategy.node_config.add(var_name="W:0", partitioner="2,1")
    node.PSSynchronizer.reduction_destination = "/job:worker/task:0/device:CPU:0"
    for i in range(2):
        part = node.part_config.add(var_name="W/part_{}:0".format(i))
        part.PSSynchronizer.reduction_destination = "/job:worker/task:0/device:CPU:0"
    result = GraphTransformer(strategy, NodeContext("mapper", 0, 1)).transform(item)
    dist = tf.Graph()
    with dist.as_default():
        tf1.import_graph_def(result.item.graph_def, name="")
    aliases = result.partitions["W"].aliases
    mapper = FetchMapper(graph, dist, result.assignment, aliases=aliases)
    names, _ = mapper.fetch(w)
    assert names[0].endswith(aliases["W/Read/ReadVariableOp:0"]) and len(names) == 1
    with pytest.raises(SessionError, match="does not exist in the distributed graph"):
        FetchMapper(graph, dist, result.assignment).fetch(w)


# -- helpers of the session ---------------------------------------------------------

def test_flatten_fetches_round_trip():
    Pair = collections.namedtuple("Pair", "a b")
    structure = {"x": [1, (2, 3)], "y": Pair(4, {"z": 5})}
    leaves, pack = flatten_fetches(structure)
    assert leaves == [1, 2, 3, 4, 5]
    assert pack([10, 20, 30, 40, 50]) == {"x": [10, (20, 30)], "y": Pair(40, {"z": 50})}


def test_watched_caller_returns_raises_and_stops_waiting_on_a_failure():
    failure = []
    caller = WatchedCaller(lambda: failure[0] if failure else None, interval=0.05)
    assert caller(lambda: 42) == 42
    with pytest.raises(KeyError):
        caller(lambda: {}["missing"])
    release = threading.Event()
    seen = []

    def stuck():
        seen.append(True)
        failure.append(RemoteWorkerError("127.0.0.2", exit_code=1))
        release.wait(30)
    with pytest.raises(RemoteWorkerError, match="127.0.0.2 exited with code 1"):
        caller(stuck)                  # the stuck call never returns; the failure ends the wait
    assert seen and caller.in_flight
    release.set()
    assert wait_until(lambda: not caller.in_flight, 5)



def test_a_closed_watched_caller_ends_its_thread_after_its_last_call():
    with WatchedCaller(lambda: None, interval=0.05) as caller:
        assert caller(lambda: 7) == 7
    caller._thread.join(5)
    assert not caller._thread.is_alive()
    with pytest.raises(RuntimeError, match="closed"):   # not a wait for a thread that is gone
        caller(lambda: 8)


class _StuckClose:
    """A session whose close never returns, as TensorFlow's can after a node is gone."""

    def __init__(self):
        self.release = threading.Event()
        self.returned = threading.Event()

    def close(self):
        self.release.wait(60)
        self.returned.set()


@pytest.mark.parametrize("troubled", [True, False], ids=["after-a-failure", "healthy"])
def test_a_close_that_blocks_is_left_behind_within_its_bound(troubled, monkeypatch, capsys):
    monkeypatch.setattr("autodist.runtime.session.distributed.CLOSE_TIMEOUT", 0.3)
    stuck = _StuckClose()
    started = time.monotonic()
    close_bounded(stuck, troubled)
    left_behind = not stuck.returned.is_set()   # close_bounded returned while the close still blocked
    elapsed = time.monotonic() - started
    stuck.release.set()
    assert left_behind and elapsed >= (CLOSE_GRACE if troubled else 0.3)   # ... after waiting its bound
    said = capsys.readouterr().err
    assert ("did not close within" in said) is (not troubled)   # expected after a failure: no noise


def test_await_failure_waits_only_for_errors_a_vanished_peer_causes():
    calls = []

    def failure():
        calls.append(1)
        return RemoteWorkerError("peer") if len(calls) >= 3 else None
    unavailable = tf.errors.UnavailableError(None, None, "peer gone")
    assert isinstance(await_failure(failure, unavailable, grace=30, interval=0.01), RemoteWorkerError)
    calls.clear()
    invalid = tf.errors.InvalidArgumentError(None, None, "bad feed")
    assert await_failure(failure, invalid, grace=30, interval=0.01) is None
    assert len(calls) == 1             # a user error is not a peer's fault: no waiting


def test_only_calls_that_train_are_steps_for_the_progress_line(job):
    """A read of the trained variables after the last step is a session call, not a step (no "201/200")."""
    session, model, ad = job
    monitor = ad.job._monitor
    before = monitor.snapshot()
    for _ in range(2):   # twice: the second call of a signature runs its cached plan
        session.run(model["train"], _feed(model, 4))
        session.run([model["w"], model["emb"]])
        session.run(model["per_example"], _feed(model, 4))
    after = monitor.snapshot()
    assert after["steps"] - before["steps"] == 6
    assert after["trained"] - before["trained"] == 2

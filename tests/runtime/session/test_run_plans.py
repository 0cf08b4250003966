"""Run plans: a repeated run signature is mapped once and called through a TensorFlow callable.

Checked on one in-process session (one node, two CPU replicas, AllReduce):
a signature runs the ordinary way first, gets its plan the second time, and
the plan's numbers are the ordinary path's; feeds that do not fit a plan,
traced runs and unplannable dtypes take the ordinary path, so their errors
and results are the ones ``Session.run`` gives.
"""
import numpy as np
import pytest
import tensorflow as tf

from autodist import AutoDist
from autodist.runtime.session.run_plans import RunPlan, RunPlans, signature
from autodist.strategies import AllReduce

tf1 = tf.compat.v1


@pytest.fixture(scope="module")
def job(spec):
    ad = AutoDist(spec, AllReduce())
    with tf.Graph().as_default(), ad.scope():
        x = tf1.placeholder(tf.float32, [None, 3], name="x")
        y = tf1.placeholder(tf.float32, [None], name="y")
        tag = tf1.placeholder(tf.string, [], name="tag")
        w = tf1.get_variable("w", initializer=tf.constant([[0.5], [-0.25], [1.0]]))
        pred = tf.matmul(x, w)[:, 0]
        loss = tf.reduce_mean(tf.square(pred - y))
        train = tf1.train.GradientDescentOptimizer(0.1).minimize(loss)
        model = dict(x=x, y=y, w=w, pred=pred, train=train, tag_len=tf.strings.length(tag), tag=tag)
        session = ad.create_distributed_session()
    yield session, model
    session.close()


def _batch(rows, seed=0):
    rs = np.random.RandomState(seed)
    return rs.rand(rows, 3).astype(np.float32), rs.rand(rows).astype(np.float32)


def _plan(session, fetches, feed_dict):
    entry = session._plans._entries.get(signature(fetches, feed_dict)[0])
    return None if entry is None else entry[1]


def test_signature_compares_elements_by_identity_and_strings_by_value():
    a, b = object(), object()
    key, held = signature([a, "loss:0", {"k": b}], {a: 1, "x:0": 2})
    assert key == signature([a, "loss:0", {"k": b}], {a: 3, "x:0": 4})[0], "feed values are not part of it"
    assert key != signature([b, "loss:0", {"k": a}], {a: 1, "x:0": 2})[0]
    assert key != signature((a, "loss:0", {"k": b}), {a: 1, "x:0": 2})[0], "the structure's types count"
    assert key != signature([a, "loss:0", {"k": b}], {"x:0": 2, a: 1})[0], "feed order gives the value order"
    assert all(any(h is o for h in held) for o in (a, b)), "a plan keeps what its key names alive"


def test_the_second_run_of_a_signature_makes_a_plan_with_the_same_numbers(job):
    session, m = job
    x, y = _batch(5)
    fetches, feed = [m["pred"], m["w"]], {m["x"]: x, m["y"]: y}
    first = session.run(fetches, feed)
    assert _plan(session, fetches, feed) is None, "the first run is the ordinary one"
    second = session.run(fetches, {m["x"]: x, m["y"]: y})
    assert isinstance(_plan(session, fetches, feed), RunPlan)
    traced = session.run(fetches, feed, options=tf1.RunOptions())   # options: the ordinary path
    for got in (second, traced):
        np.testing.assert_array_equal(got[0], first[0])            # split 3 + 2 rows, concatenated back
        np.testing.assert_array_equal(got[1], first[1])
    np.testing.assert_allclose(first[0], x @ first[1][:, 0], rtol=1e-6)


def test_a_planned_train_step_trains_like_the_ordinary_one(job):
    session, m = job
    x, y = _batch(4, seed=1)
    w0 = session.run(m["w"])
    want = w0.copy()
    for _ in range(3):
        assert session.run(m["train"], {m["x"]: x, m["y"]: y}) is None
        residual = 2 * (x @ want[:, 0] - y) / 4
        want = want - 0.1 * (x * residual[:, None]).sum(0)[:, None]
    assert isinstance(_plan(session, m["train"], {m["x"]: x, m["y"]: y}), RunPlan)
    np.testing.assert_allclose(session.run(m["w"]), want, rtol=1e-5)


def test_a_feed_that_does_not_fit_the_plan_gets_the_ordinary_error(job):
    session, m = job
    x, y = _batch(4)
    for _ in range(2):
        session.run(m["pred"], {m["x"]: x})
    assert isinstance(_plan(session, m["pred"], {m["x"]: x}), RunPlan)
    with pytest.raises(ValueError, match="Cannot feed value of shape"):
        session.run(m["pred"], {m["x"]: np.zeros([4, 2], np.float32)})
    assert session.run(m["pred"], {m["x"]: [[1.0, 0.0, 0.0]] * 2}).shape == (2,), "lists convert as before"


def test_string_feeds_run_the_ordinary_way(job):
    session, m = job
    for _ in range(3):
        assert session.run(m["tag_len"], {m["tag"]: "four"}) == 4
    assert _plan(session, m["tag_len"], {m["tag"]: "four"}) is False


def test_plans_are_bounded_least_recently_used_first(job):
    session, m = job
    plans = RunPlans(session._session, session._mapper, size=2)
    keys = []
    for fetch in (m["pred"], m["w"], m["train"]):
        key, held, plan = plans.lookup(fetch, None, lambda f: ([f], lambda v: v[0]))
        assert plan is None
        plans.ran(key, held)
        keys.append(key)
    assert list(plans._entries) == keys[1:]


def _planned(session, fetches, feed_dict):
    """The plan a fresh RunPlans makes for a signature (its second lookup)."""
    plans = RunPlans(session._session, session._mapper)
    for _ in range(2):
        key, held, plan = plans.lookup(fetches, feed_dict, lambda f: (list(f), lambda values: values))
        plans.ran(key, held)
    return plan


def test_a_plan_counts_the_rows_a_step_feeds_as_the_mapper_does(job):
    session, m = job
    x, y = _batch(5)
    feed = {m["y"]: y, m["x"]: x}   # split 3 + 2 over the two replicas
    assert _planned(session, [m["pred"]], feed).bind(list(feed.values()))[1] == session._mapper.rows(feed) == 5
    assert _planned(session, [m["w"]], None).bind([])[1] == session._mapper.rows(None) == 0, "nothing fed"

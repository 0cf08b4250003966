"""Collective keys stay in their window (``names.KEY_WINDOWS``): a plan that needs more fails while its graph is built.

A job's training collectives take keys from its key base up, the every-step
group's (Keras ``fit``'s metrics under accumulation) from 80000 up; the init
broadcasts start at 90000. A plan with more all-reduce collectives than its
window holds would take the next window's keys (or the next job's) and fail or
mix tensors at run time; the kernel refuses it by name instead. The edge is
reached at its real size through ``Collectives`` (a real plan needs 1231
sparse variables for it), and through a real transform with the window shrunk
to one sparse variable's keys.
"""
import types

import pytest
import tensorflow as tf

from autodist.errors import TransformError
from autodist.kernel.synchronization.compressor import Collectives
from autodist.plan import names
from kernel_harness import capture, device, make_strategy, transform

tf1 = tf.compat.v1
BASE = 100000 * 4321


def _collectives(group=""):
    offset = names.EVERY_STEP_KEY_OFFSET if group else 0   # the every-step view's key base (assignment._view)
    return Collectives(types.SimpleNamespace(key_base=BASE + offset, group=group))


@pytest.mark.parametrize("window", ["training", "every-step"])
def test_a_window_gives_every_key_up_to_its_edge_and_then_refuses(window):
    first, end = names.key_window(window)
    collectives = _collectives("" if window == "training" else "every-step")
    assert collectives.key() == BASE + first
    assert collectives.reserve(end - first - 2) == BASE + first + 1
    assert collectives.key() == BASE + end - 1   # the window's last key
    edge = r"more than the {} collective keys of the job's '{}' window \(keys {}..{}\)".format(
        end - first, window, BASE + first, BASE + end - 1)
    with pytest.raises(TransformError, match=edge):
        collectives.key()


def test_a_reservation_that_would_cross_the_edge_is_refused_whole():
    first, end = names.key_window("training")
    collectives = _collectives()
    collectives.reserve(end - first - 10)
    with pytest.raises(TransformError, match="fewer all-reduce groups"):
        collectives.reserve(65)   # a sparse variable's keys
    assert collectives.reserve(10) == BASE + end - 10


def _sparse_model(count):
    def build():
        ids = tf1.placeholder(tf.int32, [None], name="ids")
        tables = [tf1.get_variable("emb{}".format(i), initializer=tf.zeros([4, 2])) for i in range(count)]
        loss = tf.add_n([tf.reduce_sum(tf.gather(t, ids)) for t in tables])
        tf1.train.GradientDescentOptimizer(0.1).minimize(loss)
    return capture(build)[0]


def test_a_plan_that_reaches_the_edge_builds_and_one_past_it_fails_naming_the_pass(monkeypatch):
    # a sparse variable's all-reduce takes 65 keys (its row counts' gather, then two per padded size)
    monkeypatch.setattr(names, "KEY_WINDOWS", (("training", 1, 66),) + names.KEY_WINDOWS[1:])
    strategy = make_strategy([device(0, 0), device(0, 1)], ar={"emb0": {}})
    assert transform(_sparse_model(1), strategy).item is not None   # keys 1..65: the whole window
    strategy = make_strategy([device(0, 0), device(0, 1)], ar={"emb0": {}, "emb1": {}})
    with pytest.raises(TransformError, match=r"pass '\S+'.*more than the 65 collective keys of the job's 'training'"):
        transform(_sparse_model(2), strategy)

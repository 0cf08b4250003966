"""autodist.runtime.session.micro_steps: which calls run a train op's micro-step, and which sets of train ops a
call may fetch under gradient accumulation."""
import numpy as np
import pytest
import tensorflow as tf

from autodist import AutoDist
from autodist.errors import SessionError
from autodist.runtime.session.micro_steps import MicroSteps
from autodist.strategies import AllReduce, PS

tf1 = tf.compat.v1


def _names(schedule, *trains):
    return schedule.accumulated(["AutoDist-Replica-{}/{}".format(r, t) for t in trains for r in (0, 1)])


def test_every_kth_call_fetching_the_train_ops_updates():
    schedule = MicroSteps({"A": "A-micro"}, 3, ["AutoDist-Replica-0/", "AutoDist-Replica-1/"])
    assert [schedule.next_is_micro(_names(schedule, "A")) for _ in range(6)] == [True, True, False] * 2
    assert schedule.at_update_boundary
    assert not _names(schedule, "eval") and schedule.twins(["AutoDist-Replica-1/A", "x"]) == \
        ["AutoDist-Replica-1/A-micro", "x"]


def test_a_call_fetching_another_set_of_accumulated_train_ops_is_refused():
    """Calls [A], [A, B], [A] with k = 2: counted per set, A would apply three micro-batches' gradients over 2 and
    then one over 2; counted per train op, A's update would run B's synchronization mid-accumulation."""
    schedule = MicroSteps({"A": "A-micro", "B": "B-micro"}, 2, ["AutoDist-Replica-0/", "AutoDist-Replica-1/"])
    assert schedule.next_is_micro(_names(schedule, "A"))
    with pytest.raises(SessionError, match=r"accumulation_steps=2\): this call fetches the train ops A, B where "
                                           r"earlier calls fetched A"):
        schedule.next_is_micro(_names(schedule, "A", "B"))
    assert not schedule.next_is_micro(_names(schedule, "A"))   # the refused call did not count


@pytest.mark.parametrize("builder", [AllReduce(), PS()], ids=["AllReduce", "PS"])
def test_the_session_refuses_the_call_pattern_and_keeps_training_the_first_set(spec, builder):
    ad = AutoDist(spec, builder, accumulation_steps=2)
    with tf.Graph().as_default(), ad.scope():
        x = tf1.placeholder(tf.float32, [None])
        a = tf1.get_variable("a", initializer=1.0)
        b = tf1.get_variable("b", initializer=1.0)
        train_a = tf1.train.GradientDescentOptimizer(0.5).minimize(tf.reduce_mean(x * a))
        train_b = tf1.train.GradientDescentOptimizer(0.5).minimize(tf.reduce_mean(x * b))
        sess = ad.create_distributed_session()
        batch = np.array([1.0, 3.0], np.float32)   # a gradient of 2 for either variable
        sess.run(train_a, {x: batch})
        with pytest.raises(SessionError, match="train ops .* where earlier calls fetched"):
            sess.run([train_a, train_b], {x: batch})
        sess.run(train_a, {x: batch})
        assert sess.run(a) == 1.0 - 0.5 * 2.0   # one update of a, from the two calls that fetched it

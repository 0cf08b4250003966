"""tf.data iterators in the graph: replicas draw their own elements, nodes their own shard.

The kernel keeps an iterator (its dataset ops and MakeIterator) once per node,
so each replica's get_next takes the next batch; each node shards its input
itself with ``ds.shard(ad.num_workers, ad.worker_index)`` (docs/input_pipelines.md).
An epoch must visit every example exactly once, over all replicas and nodes.
"""
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from autodist import AutoDist
from autodist.strategies import PS, AllReduce

EXAMPLES, BATCH, REPLICAS = 48, 4, 2
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _pipeline(ad, make_iterator):
    ids = np.arange(EXAMPLES, dtype=np.int64)
    features = np.random.RandomState(0).randn(EXAMPLES, 3).astype(np.float32)
    dataset = tf.data.Dataset.from_tensor_slices((ids, features))
    dataset = dataset.shard(ad.num_workers, ad.worker_index).batch(BATCH)
    iterator = make_iterator(dataset)
    batch_ids, x = iterator.get_next()
    w = tf.Variable(tf.zeros([3, 1]), name="w")
    train = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(tf.reduce_mean(tf.square(x @ w - 1.0)))
    return iterator, batch_ids, train


def _epoch(session, batch_ids, train):
    steps = EXAMPLES // (BATCH * REPLICAS)
    seen = [session.run([batch_ids, train])[0] for _ in range(steps)]
    for step_ids in seen:   # the replicas' halves of one step are different batches
        assert len(step_ids) == BATCH * REPLICAS
        assert not set(step_ids[:BATCH]) & set(step_ids[BATCH:])
    return np.concatenate(seen)


@pytest.mark.parametrize("builder", [AllReduce(), PS()], ids=["AllReduce", "PS"])
def test_one_epoch_visits_each_example_once_then_ends(spec, builder):
    ad = AutoDist(spec, builder)
    with tf.Graph().as_default(), ad.scope():
        _, batch_ids, train = _pipeline(ad, tf.compat.v1.data.make_one_shot_iterator)
        session = ad.create_distributed_session()
        seen = _epoch(session, batch_ids, train)
        assert sorted(seen.tolist()) == list(range(EXAMPLES))
        with pytest.raises(tf.errors.OutOfRangeError):
            session.run([batch_ids, train])


def test_reinitializing_the_iterator_starts_a_new_epoch_for_every_replica(spec):
    ad = AutoDist(spec, AllReduce())
    with tf.Graph().as_default(), ad.scope():
        iterator, batch_ids, train = _pipeline(ad, tf.compat.v1.data.make_initializable_iterator)
        session = ad.create_distributed_session()
        for _ in range(2):
            session.run(iterator.initializer)
            assert sorted(_epoch(session, batch_ids, train).tolist()) == list(range(EXAMPLES))


_TWO_NODE_SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np
    import tensorflow as tf
    sys.path.insert(0, {tests!r})
    from autodist import AutoDist
    from autodist.strategies import AllReduce
    from test_input_pipeline import EXAMPLES, BATCH, _pipeline

    ad = AutoDist({spec!r}, AllReduce())
    with tf.Graph().as_default(), ad.scope():
        _, batch_ids, train = _pipeline(ad, tf.compat.v1.data.make_one_shot_iterator)
        session = ad.create_distributed_session()
        steps = EXAMPLES // (BATCH * ad.num_workers)
        seen = np.concatenate([session.run([batch_ids, train])[0] for _ in range(steps)])
        # one write: print() writes its arguments one by one, and a line from the other node,
        # which the chief's console writes as it arrives, can land between them
        sys.stdout.write("SEEN {{}} {{}}\\n".format(ad.worker_index, " ".join(str(i) for i in seen)))
        sys.stdout.flush()
""")


@pytest.mark.slow
def test_two_nodes_shard_the_data_and_cover_an_epoch_once(tmp_path):
    script = tmp_path / "two_node_epoch.py"
    spec = os.path.join(ROOT, "resource_specs", "loopback_two_nodes.yml")
    script.write_text(_TWO_NODE_SCRIPT.format(tests=os.path.dirname(os.path.abspath(__file__)), spec=spec))
    done = subprocess.run([sys.executable, str(script)], cwd=str(tmp_path), capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    seen = {}
    for match in re.finditer(r"SEEN (\d) ([\d ]+)", done.stdout + done.stderr):
        seen[int(match.group(1))] = [int(i) for i in match.group(2).split()]
    assert sorted(seen) == [0, 1]
    assert not set(seen[0]) & set(seen[1])
    assert sorted(seen[0] + seen[1]) == list(range(EXAMPLES))

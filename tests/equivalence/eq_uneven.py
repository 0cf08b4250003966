"""Uneven inputs: each node reads its own tf.data shard, node 1 three batches fewer than node 0.

Node 0's shard is 8 batches of ``BATCH`` rows, its last one partial; node 1's
is three batches fewer. A node of several replicas reads as many batches a step. Each node trains until its session raises
``OutOfRangeError`` (the loop every tf.data script has). The single-device
reference trains, step after step, on the rows the job's replicas actually
held in that step: both nodes' batches while both have data, then (``join``)
node 0's alone; ``end`` stops at node 1's end. The model has a dense and an
embedding (IndexedSlices) gradient and tf1 Adam, whose moments notice any
step too many or too few.
"""
import numpy as np

BATCH = 4
ROWS = {"127.0.0.1": 8 * BATCH - 2, "127.0.0.2": 5 * BATCH}   # 8 batches (the last partial), 5 batches
VOCAB = 50


def shard(address):
    """(ids, features, targets) of a node's shard."""
    rs = np.random.RandomState(700 + sorted(ROWS).index(address))
    n = ROWS[address]
    ids = rs.randint(0, VOCAB, size=(n, 2)).astype(np.int64)
    ids[::3, 0] = 5   # an id every node looks up
    x = rs.rand(n, 3).astype(np.float32)
    y = (x @ np.array([[1.0], [-2.0], [0.5]], np.float32) + 0.1 * rs.randn(n, 1)).astype(np.float32)
    return ids, x, y


def _model(ids, x, y):
    import tensorflow as tf
    tf1 = tf.compat.v1
    emb = tf1.get_variable("emb", initializer=tf.constant(
        np.linspace(-0.2, 0.2, VOCAB * 2, dtype=np.float32).reshape(VOCAB, 2)))
    w = tf1.get_variable("w", initializer=tf.constant([[0.1], [0.2], [-0.1], [0.3], [0.05]]))
    hidden = tf.concat([x, tf.reduce_sum(tf.nn.embedding_lookup(emb, ids), axis=1)], axis=1)
    loss = tf.reduce_mean(tf.square(tf.matmul(hidden, w) - y))
    return tf1.train.AdamOptimizer(0.05).minimize(loss), [emb, w]


def steps_of(policy, replicas):
    """Each step's rows of each node's shard, ``[[slice or None per batch], ...]``: a node of ``replicas[a]``
    replicas reads that many batches a step."""
    counts = {a: -(-n // BATCH) for a, n in ROWS.items()}
    full = {a: counts[a] // replicas[a] for a in ROWS}                 # steps where all its replicas have data
    some = {a: -(-counts[a] // replicas[a]) for a in ROWS}             # steps where one of them has
    last = min(full.values()) if policy == "end" else max(some.values())
    return [[slice(b * BATCH, min((b + 1) * BATCH, ROWS[a])) if b < counts[a] else None
             for a in sorted(ROWS) for b in range(s * replicas[a], (s + 1) * replicas[a])] for s in range(last)]


def reference(policy, replicas):
    """(steps, variables) of one device trained on each step's rows of both shards."""
    import tensorflow as tf
    tf1 = tf.compat.v1
    data = [shard(a) for a in sorted(ROWS)]
    with tf.Graph().as_default():
        ids = tf1.placeholder(tf.int64, [None, 2])
        x = tf1.placeholder(tf.float32, [None, 3])
        y = tf1.placeholder(tf.float32, [None, 1])
        train, variables = _model(ids, x, y)
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            steps = steps_of(policy, replicas)
            owners = [d for a, d in zip(sorted(ROWS), data) for _ in range(replicas[a])]
            for rows in steps:
                parts = [tuple(a[r] for a in d) for d, r in zip(owners, rows) if r is not None]
                sess.run(train, {ph: np.concatenate([p[i] for p in parts]) for i, ph in enumerate((ids, x, y))})
            return len(steps), sess.run(variables)


def run_node(case, address, servers, chief, spec_path, rows):
    """This node's number of steps until its session raised OutOfRangeError, and its variables."""
    import tensorflow as tf
    import eq_harness
    from autodist import AutoDist
    from autodist.runtime.context import JobContext
    job = JobContext(job_id=case["job_id"], address=address, servers=servers, chief=chief,
                     strategy_path=case["strategy_path"], strategy_wait=60.0, collective_key_base=case["key_base"])
    ad = AutoDist(spec_path, eq_harness.builder_of(case["builder"], {}), job=job, uneven_inputs=case["policy"])
    with tf.Graph().as_default(), ad.scope():
        dataset = tf.data.Dataset.from_tensor_slices(shard(address)).batch(BATCH)
        ids, x, y = tf.compat.v1.data.make_one_shot_iterator(dataset).get_next()
        train, variables = _model(ids, x, y)
        sess = ad.create_distributed_session()
        try:
            steps = 0
            while steps < 20:   # bounded: both shards end long before
                try:
                    sess.run(train)
                except tf.errors.OutOfRangeError:
                    break
                steps += 1
            values = sess.run(variables)
        finally:
            sess.close()
    return steps, values

"""A sparse-embedding recommender (matrix factorization) on generated ratings, under PartitionedPS.

    python examples/sparse_recommender.py

Ratings come from hidden user and item factors (4 dimensions) plus noise:
200000 ratings of 4000 users x 500 items, 10% held out. The model learns 32-dim
user and item embeddings and biases with Adam; ``tf.nn.embedding_lookup`` gives
IndexedSlices gradients to parameter servers. PartitionedPS splits the 4000 x 32
user table (512 KiB) and its Adam slots over both nodes' servers; with
``--strategy Parallax`` the embeddings stay whole on parameter servers and the
dense global bias is all-reduced. Each of the two loopback nodes feeds half of
every global batch of 256. Expected: held-out RMSE falls from ~1.0 (predicting
the mean) to below 0.5 after the default 1500 steps (measured 0.40 at step 1500,
about 35 s; noise floor 0.25).
"""
import numpy as np

from common import autodist, batch_loss, node_rows, parser, quiet_start, say

USERS, ITEMS, RANK, DIM, BATCH = 4000, 500, 4, 32, 256


def ratings(count=200000, seed=0):
    """(users, items, ratings) of generated data: dot products of hidden factors, plus noise."""
    rng = np.random.RandomState(seed)
    user_factors = rng.randn(USERS, RANK).astype(np.float32) / np.sqrt(RANK)
    item_factors = rng.randn(ITEMS, RANK).astype(np.float32)
    users = rng.randint(0, USERS, count).astype(np.int32)
    items = rng.randint(0, ITEMS, count).astype(np.int32)
    values = np.sum(user_factors[users] * item_factors[items], axis=1) + 0.25 * rng.randn(count)
    return users, items, values.astype(np.float32)


def main():
    args = parser(__doc__.splitlines()[0], "PartitionedPS", 1500, log_every=250).parse_args()
    quiet_start(args)
    import tensorflow as tf

    ad = autodist(args)
    users, items, values = ratings()
    held_out = len(values) // 10
    train = slice(held_out, None)
    rows = node_rows(ad, BATCH)
    with tf.Graph().as_default(), ad.scope():
        user = tf.compat.v1.placeholder(tf.int32, [None], name="user")
        item = tf.compat.v1.placeholder(tf.int32, [None], name="item")
        rating = tf.compat.v1.placeholder(tf.float32, [None], name="rating")
        init = tf.random_normal_initializer(stddev=0.1, seed=1)
        user_emb = tf.Variable(init([USERS, DIM]), name="user_embedding")
        item_emb = tf.Variable(init([ITEMS, DIM]), name="item_embedding")
        user_bias = tf.Variable(tf.zeros([USERS]), name="user_bias")
        item_bias = tf.Variable(tf.zeros([ITEMS]), name="item_bias")
        global_bias = tf.Variable(0.0, name="global_bias")
        prediction = (tf.reduce_sum(tf.nn.embedding_lookup(user_emb, user) * tf.nn.embedding_lookup(item_emb, item),
                                    axis=1)
                      + tf.gather(user_bias, user) + tf.gather(item_bias, item) + global_bias)
        errors = tf.square(prediction - rating)
        train_op = tf.compat.v1.train.AdamOptimizer(0.01).minimize(batch_loss(ad, errors, BATCH))
        session = ad.create_distributed_session()
        say(ad, "strategy {}: {} variables on parameter servers, {} partitioned".format(
            args.strategy, len(session.transform_result.assignment.ps_vars),
            len(session.transform_result.partitions)))

        def rmse(part):
            feed = {user: users[part], item: items[part], rating: values[part]}
            return float(np.sqrt(np.mean(session.run(errors, feed))))

        u, i, r = users[train], items[train], values[train]
        say(ad, "step    0  held-out RMSE {:.4f}".format(rmse(slice(0, held_out))))
        for step in range(1, args.steps + 1):
            start = (step - 1) * BATCH % (len(r) - BATCH + 1)
            batch = slice(start + rows.start, start + rows.stop)
            session.run(train_op, {user: u[batch], item: i[batch], rating: r[batch]})
            if step % args.log_every == 0:
                error = rmse(slice(0, held_out))
                ad.log_scalar("held_out_rmse", error)
                say(ad, "step {:4d}  held-out RMSE {:.4f}".format(step, error))
        say(ad, "final held-out RMSE {:.4f} (noise floor 0.25)".format(rmse(slice(0, held_out))))


if __name__ == "__main__":
    main()

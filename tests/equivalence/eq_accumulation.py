"""Gradient accumulation cases: k micro-steps of batch b on the job == one single-device step of batch k*b.

``run_node`` (sess.run) feeds each node its rows of every micro-batch and
calls the train op k times per update; ``run_function_node`` does the same
through ``ad.function`` with a Keras model; ``reference`` /
``function_reference`` are one device on the concatenated micro-batches.
Per-example losses of every micro-step (the weights do not move within an
update) and the final variables must agree.
"""
import numpy as np

import eq_harness

K = 4


def _micro_batch(batch, step, micro):
    """Micro-batch ``micro`` of update ``step``: the model's batch of the (step * K + micro)-th call."""
    return batch(step * K + micro)


def reference(model_name):
    """(per-update losses of the k*b rows, variables) of the single-device graph."""
    import tensorflow as tf
    from autodist.capture.queries import tf_variable
    from eq_models import MODELS
    build, batch = MODELS[model_name]
    with tf.Graph().as_default():
        with eq_harness._capture_scope():
            model = build()
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            losses = []
            for step in range(eq_harness.STEPS):
                parts = [_micro_batch(batch, step, m) for m in range(K)]
                feed = {model.placeholders[key]: np.concatenate([p[key] for p in parts])
                        for key in parts[0]}
                losses.append(sess.run([model.train, model.per_example], feed)[1])
            return losses, sess.run([tf_variable(v) for v in model.variables])


def run_node(case, address, servers, chief, spec_path, rows):
    """This node's per-update losses (its rows of the k micro-batches, in order) and variables."""
    import tensorflow as tf
    from eq_models import MODELS
    build, batch = MODELS[case["model"]]
    ad = eq_harness.job_autodist(case, address, servers, chief, spec_path)
    with tf.Graph().as_default(), ad.scope():
        model = build()
        sess = ad.create_distributed_session()
        try:
            losses = []
            for step in range(eq_harness.STEPS):
                per_update = []
                for micro in range(K):
                    feed = {model.placeholders[key]: value[rows]
                            for key, value in _micro_batch(batch, step, micro).items()}
                    per_update.append(sess.run([model.train, model.per_example], feed)[1])
                losses.append(per_update)
            values = sess.run(model.variables)
        finally:
            sess.close()
    return losses, values


def check(reference_result, results):
    """The job's micro-step losses, reassembled in row order, and every node's variables equal the reference."""
    losses, values = reference_result
    job_losses = [np.concatenate([np.concatenate([node[0][step][micro] for node in results])
                                  for micro in range(K)]) for step in range(eq_harness.STEPS)]
    for _, node_values in results:
        eq_harness.check((losses, values), job_losses, node_values)


# -- ad.function with a Keras model -----------------------------------------------------------

def _keras_parts():
    import keras
    keras.utils.set_random_seed(5)
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(5, activation="tanh"), keras.layers.Dense(3)])
    return model, keras.optimizers.Adam(0.05)


def _function_batch(step):
    rs = np.random.RandomState(900 + step)
    return rs.rand(12, 6).astype(np.float32), rs.randint(0, 3, 12).astype(np.int32)


def _per_example(model, x, y):
    import tensorflow as tf
    return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=model(x, training=True))


def function_reference():
    """(per-update losses, weights): eager Keras on one device on the k micro-batches at once."""
    import keras
    import tensorflow as tf
    keras.backend.clear_session(free_memory=False)
    model, optimizer = _keras_parts()
    losses = []
    for step in range(eq_harness.STEPS):
        parts = [_function_batch(step * K + m) for m in range(K)]
        x, y = np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
        with tf.GradientTape() as tape:
            per = _per_example(model, x, y)
            loss = tf.reduce_mean(per)
        optimizer.apply(tape.gradient(loss, model.trainable_variables), model.trainable_variables)
        losses.append(per.numpy())
    return losses, [w.numpy() for w in model.trainable_weights]


def run_function_node(case, address, servers, chief, spec_path, rows):
    import keras
    import tensorflow as tf
    keras.backend.clear_session(free_memory=False)
    ad = eq_harness.job_autodist(case, address, servers, chief, spec_path)
    with tf.Graph().as_default(), ad.scope():
        model, optimizer = _keras_parts()

    @ad.function
    def step_fn(x, y):
        with tf.GradientTape() as tape:
            per = _per_example(model, x, y)
            loss = tf.reduce_mean(per)
        optimizer.apply(tape.gradient(loss, model.trainable_variables), model.trainable_variables)
        return per
    losses = []
    for step in range(eq_harness.STEPS):
        per_update = []
        for micro in range(K):
            x, y = _function_batch(step * K + micro)
            per_update.append(step_fn(x[rows], y[rows]))
        losses.append(per_update)
    values = ad.session.run([w.value for w in model.trainable_weights])
    ad.session.close()
    return losses, values

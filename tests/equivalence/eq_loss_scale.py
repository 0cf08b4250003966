"""One node of the loss-scaling case: an inf gradient on one replica of one node, under mixed_float16.

The model trains two steps with a ``LossScaleOptimizer``; in the second, the
last replica of the last node gets rows that overflow float16, so its
gradient is inf. The node reports, for each of its replicas, the weights
before and after that step and its copy of the loss scale and its step
counter (read replica by replica from the distributed graph): every replica
of the job must have skipped the step and halved its scale.
"""
import keras
import numpy as np
import tensorflow as tf

import eq_harness

INITIAL_SCALE = 1024.0


def batches():
    rs = np.random.RandomState(11)
    normal = rs.rand(12, 3).astype(np.float32)
    poisoned = rs.rand(12, 3).astype(np.float32)
    poisoned[-1] = 6.0e4   # the last row: the last replica of the last node; x * w overflows float16
    return [normal, poisoned]


def _replica_values(session, var_ops):
    """{(replica prefix, variable): value} of this node's copies (a shared variable: its one copy)."""
    graph = session.distributed_graph
    assignment = session.transform_result.assignment
    reads = {}
    with graph.as_default():
        for replica in assignment.local:
            for var_op in var_ops:
                name = var_op if assignment.is_shared(var_op) else replica.prefix + var_op
                handle = graph.get_operation_by_name(name)
                with tf.device(handle.device):
                    reads[(replica.prefix, var_op)] = tf.raw_ops.ReadVariableOp(
                        resource=handle.outputs[0], dtype=handle.get_attr("dtype"))
    return session._session.run(reads)


def run_node(case, address, servers, chief, spec_path, rows):
    keras.backend.clear_session(free_memory=False)
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        ad = eq_harness.job_autodist(case, address, servers, chief, spec_path)
        with tf.Graph().as_default(), ad.scope():
            keras.utils.set_random_seed(3)
            layer = keras.layers.Dense(2, name="scaled")
            optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1), initial_scale=INITIAL_SCALE)
            x = tf.compat.v1.placeholder(tf.float32, [None, 3])
            out = layer(x)
            optimizer.build(layer.trainable_variables)
            loss = optimizer.scale_loss(tf.reduce_mean(tf.cast(out, tf.float32) ** 2))
            weights = [v.value for v in layer.trainable_variables]
            train = optimizer.apply_gradients(zip(tf.gradients(loss, weights), layer.trainable_variables))
            session = ad.create_distributed_session()
        state = [op.name for op in (optimizer.dynamic_scale.value.op, optimizer.step_counter.value.op)]
        watched = [w.op.name for w in weights] + state
        first, second = batches()
        session.run(train, {x: first[rows]})
        before = _replica_values(session, watched)
        session.run(train, {x: second[rows]})
        after = _replica_values(session, watched)
        session.close()
    finally:
        keras.mixed_precision.set_global_policy("float32")
    return {"before": before, "after": after, "weights": [w.op.name for w in weights], "state": state}

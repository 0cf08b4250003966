"""One node's part of a zoo case (``zoo_models``), run by ``eq_harness``'s node processes (as ``zoo.eq_zoo``)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

import eq_harness  # noqa: E402
import zoo_models  # noqa: E402


def run_node(case, address, servers, chief, spec_path, rows):
    """``zoo_models.run`` of this node (``fit`` shares the data out itself) and, per replica of this node, the
    copies of the model's non-trainable weights (batch-norm statistics: equal on every replica when synchronized)."""
    import autodist
    from autodist.runtime.context import JobContext
    keras.backend.clear_session(free_memory=False)
    zoo = zoo_models.MODELS[case["model"]]
    job = JobContext(job_id=case["job_id"], address=address, servers=servers, chief=chief,
                     strategy_path=case["strategy_path"], strategy_wait=60.0, collective_key_base=case["key_base"])
    ad = autodist.AutoDist(spec_path, eq_harness.builder_of(case["builder"], {}), job=job,
                           sync_batch_norm=zoo.sync_batch_norm)
    with zoo_models.float_type():
        with tf.Graph().as_default(), ad.scope():
            model = zoo.build()
        result = zoo_models.run(model, case["model"])
        result["replica_statistics"] = _replica_statistics(ad, model)
    ad.session.close()
    return result


def _replica_statistics(ad, model):
    """{variable op name: [this node's replicas' values]} of the model's non-trainable weights."""
    from autodist.capture.queries import tf_variable
    session = ad.session
    graph, assignment = session.distributed_graph, session.transform_result.assignment
    reads = {}
    with graph.as_default():
        for weight in model.non_trainable_weights:
            var_op = tf_variable(weight).op.name
            if assignment.is_shared(var_op):
                continue
            reads[var_op] = []
            for replica in assignment.local:
                handle = graph.get_operation_by_name(replica.prefix + var_op)
                with tf.device(handle.device):
                    reads[var_op].append(tf.raw_ops.ReadVariableOp(resource=handle.outputs[0],
                                                                   dtype=handle.get_attr("dtype")))
    return session._session.run(reads)

"""Resource spec -> TensorFlow cluster: devices, server and session configs, servers.

Every node runs one TensorFlow server of job "worker" (``names.WORKER_JOB``);
task k is the node with the k-th smallest address. A node exposes as many CPU devices as its
spec lists (``ConfigProto.device_count``; virtual CPUs are how a CPU-only
machine runs several replicas) and its GPUs. The same config goes to the
server and to the session: devices set on one and not the other disappear.
Collective ops need the group leader set in the server's config, or they
wait forever.
"""
import tensorflow as tf

from autodist.plan.names import WORKER_JOB, collective_group_leader

__all__ = ["node_config", "start_server", "cpu_count_of"]


def cpu_count_of(node):
    """How many CPU devices a node spec asks for (ids 0..max listed)."""
    return max(node.cpus) + 1 if node.cpus else 1


def node_config(num_cpus, chief_task, threads=None, num_tasks=None):
    """ConfigProto for a node's server and its sessions (``num_tasks``: the job's nodes, when known)."""
    config = tf.compat.v1.ConfigProto(device_count={"CPU": num_cpus}, allow_soft_placement=True)
    config.experimental.collective_group_leader = collective_group_leader(chief_task)
    if threads:
        config.intra_op_parallelism_threads = threads
        config.inter_op_parallelism_threads = threads
    # Of Grappler's passes only the dependency optimizer: it drops the control edges made
    # redundant by other paths, and every control edge between two nodes is a message per
    # step (tiny PS: 1.7 -> 0.93 kB and 1.14 -> 0.84 ms per step). The whole meta optimizer
    # costs seconds on the first run of large graphs and buys nothing measurable here. A job
    # of one node has no edge between nodes to spare, and the dependency optimizer's runs over
    # every new call's graph were most of its start: ResNet50, Keras fit on two CPU replicas,
    # 268 -> 61 s from the built model to the first step (loaded machine). None runs there.
    if num_tasks == 1:
        config.graph_options.rewrite_options.disable_meta_optimizer = True
    else:
        config.graph_options.rewrite_options.optimizers.append("dependency")
    return config


def start_server(cluster_spec, task_index, config):
    """Start this process's TensorFlow server for ``task_index``; returns it."""
    return tf.distribute.Server(tf.train.ClusterSpec(cluster_spec), job_name=WORKER_JOB, task_index=task_index,
                                config=config, start=True)

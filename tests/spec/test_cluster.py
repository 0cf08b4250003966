"""spec -> ConfigProto: devices, the collective leader, and the node's thread counts."""
from autodist.spec.cluster import node_config


def test_threads_left_to_tensorflow_unless_the_spec_sets_them():
    config = node_config(2, 0)
    assert config.device_count["CPU"] == 2
    assert config.experimental.collective_group_leader.endswith("/task:0")
    assert (config.intra_op_parallelism_threads, config.inter_op_parallelism_threads) == (0, 0), \
        "0: TF_NUM_INTRAOP_THREADS / TF_NUM_INTEROP_THREADS, else one per core"
    pinned = node_config(1, 1, threads=3)
    assert (pinned.intra_op_parallelism_threads, pinned.inter_op_parallelism_threads) == (3, 3)


def test_only_grappler_dependency_optimizer_runs():
    # an empty list with the meta optimizer on would run Grappler's whole default pipeline
    rewrite = node_config(1, 0).graph_options.rewrite_options
    assert list(rewrite.optimizers) == ["dependency"] and not rewrite.disable_meta_optimizer
    assert list(node_config(1, 0, num_tasks=2).graph_options.rewrite_options.optimizers) == ["dependency"]


def test_a_job_of_one_node_runs_no_grappler_pass():
    """No control edge crosses nodes in a one-node job: the dependency optimizer would only cost its runs."""
    rewrite = node_config(2, 0, num_tasks=1).graph_options.rewrite_options
    assert rewrite.disable_meta_optimizer and not list(rewrite.optimizers)

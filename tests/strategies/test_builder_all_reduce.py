"""AllReduce: every variable all-reduced, groups of chunk_size and bucket_bytes, checked spec and compressor."""
import pytest

from autodist.proto import synchronizers_pb2
from autodist.strategies import AllReduce, PartitionedAR
from autodist.strategies.all_reduce import DEFAULT_BUCKET_BYTES

AR = synchronizers_pb2.AllReduceSynchronizer


def groups(strategy):
    return [n.AllReduceSynchronizer.group for n in strategy.node_config]


def test_every_variable_all_reduced_in_chunks(make_var, two_nodes):
    variables = [make_var("v{}".format(i), (4,), sparse=i == 2) for i in range(5)]
    strategy = AllReduce(chunk_size=2).build_from_variables(variables, two_nodes)
    assert [n.WhichOneof("synchronizer") for n in strategy.node_config] == \
        ["AllReduceSynchronizer"] * 5, "sparse variables too"
    assert groups(strategy) == [0, 0, 1, 1, 2]
    assert all(n.AllReduceSynchronizer.spec == AR.NCCL and
               n.AllReduceSynchronizer.compressor == AR.NoneCompressor and not n.partitioner
               for n in strategy.node_config)


def test_default_chunk_is_128(make_var, one_cpu):
    variables = [make_var("v{}".format(i), (2,)) for i in range(300)]
    assert groups(AllReduce().build_from_variables(variables, one_cpu)) == [i // 128 for i in range(300)]


MIB = 1 << 20


def _mib(make_var, name, mib):
    return make_var(name, (mib * MIB // 4,))   # float32


def test_a_bucket_closes_once_it_holds_bucket_bytes(make_var, one_cpu):
    variables = [_mib(make_var, n, m) for n, m in zip("abcde", (2, 5, 3, 9, 1))]
    assert groups(AllReduce(bucket_bytes=8 * MIB).build_from_variables(variables, one_cpu)) == [0, 0, 0, 1, 2], \
        "c fills the first bucket past 8 MiB; d alone fills the second"
    assert groups(AllReduce(chunk_size=1, bucket_bytes=8 * MIB).build_from_variables(variables, one_cpu)) == \
        [0, 1, 2, 3, 4], "chunk_size still bounds the members"
    assert groups(AllReduce(bucket_bytes=None).build_from_variables(variables, one_cpu)) == [0] * 5, \
        "None: chunk_size alone, as in AutoDist"


def test_the_default_bucket_splits_a_large_model(make_var, one_cpu):
    """The mlp of benchmarks/step_time.py (32 MiB, 4 x 16 MiB, biases): one group by chunk_size alone."""
    assert DEFAULT_BUCKET_BYTES == 16 * MIB
    variables = []
    for i, mib in enumerate((32, 16, 16, 16, 16)):
        variables += [_mib(make_var, "w{}".format(i), mib), make_var("b{}".format(i), (2048,))]
    assert groups(AllReduce().build_from_variables(variables, one_cpu)) == [0, 1, 1, 2, 2, 3, 3, 4, 4, 5], \
        "every bias rides with the next weights"


def test_shards_count_their_own_bytes(make_var, one_cpu):
    variables = [make_var("big", (4096, 1024)), _mib(make_var, "c", 5)]    # 16 MiB: four 4 MiB shards
    nodes = PartitionedAR(chunk_size=128).build_from_variables(variables, one_cpu).node_config
    assert [p.AllReduceSynchronizer.group for p in nodes[0].part_config] == [0, 0, 0, 0]
    assert nodes[1].AllReduceSynchronizer.group == 1, "the shards filled the first bucket"


@pytest.mark.parametrize("spec, compressor", [
    ("AUTO", "NoneCompressor"), ("RING", "HorovodCompressor"), ("NCCL", "HorovodCompressorEF"),
    ("RING", "PowerSGDCompressor"),
])
def test_spec_and_compressor(make_var, two_gpus, spec, compressor):
    node = AllReduce(4, spec, compressor).build_from_variables([make_var("w", (3, 3))], two_gpus).node_config[0]
    assert node.WhichOneof("synchronizer") == "AllReduceSynchronizer", \
        "set even when every field has its default value"
    assert AR.Spec.Name(node.AllReduceSynchronizer.spec) == spec
    assert AR.Compressor.Name(node.AllReduceSynchronizer.compressor) == compressor


def test_the_real_graph(graph_item, two_gpus):
    strategy = AllReduce(chunk_size=3).build(graph_item, two_gpus)
    assert [n.var_name for n in strategy.node_config] == ["W:0", "b:0", "emb:0", "loop_w:0"]
    assert groups(strategy) == [0, 0, 0, 1]
    assert list(strategy.graph_config.replicas) == ["127.0.0.1:GPU:0", "127.0.0.1:GPU:1"]


@pytest.mark.parametrize("kwargs, message", [
    ({"chunk_size": 0}, "chunk_size must be an integer >= 1"),
    ({"chunk_size": "8"}, "chunk_size must be an integer >= 1"),
    ({"all_reduce_spec": "nccl"}, "all_reduce_spec must be one of 'AUTO', 'NCCL', 'RING'"),
    ({"compressor": "Zip"}, "compressor must be one of 'NoneCompressor', 'HorovodCompressor', "
                            "'HorovodCompressorEF', 'PowerSGDCompressor'"),
    ({"bucket_bytes": 0}, "bucket_bytes must be an integer >= 1"),
    ({"bucket_bytes": 1.5}, "bucket_bytes must be an integer >= 1"),
], ids=["zero-chunk", "str-chunk", "spec", "compressor", "zero-bucket", "float-bucket"])
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match="AllReduce: " + message):
        AllReduce(**kwargs)

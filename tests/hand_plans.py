"""Hand-made strategies (compiled-looking protobuf plans) for the tests of the plan and the kernel; no TensorFlow.

    strategy = make_strategy([device(0, 0), device(0, 1)], ps={"w": dict(device=device(0, 0))}, ar={"b": {}})
"""
from autodist.plan.names import worker_device
from autodist.proto import strategy_pb2, synchronizers_pb2

AR = synchronizers_pb2.AllReduceSynchronizer


def device(task, index=0, kind="CPU"):
    return worker_device(task, kind, index)


def make_strategy(replicas, ps=None, ar=None, partitions=None):
    """A compiled-looking Strategy.

    ``ps``: variable op name -> dict(device, sync=True, staleness=0, proxy=False);
    ``ar``: variable op name -> dict(group=0, compressor=0, rank=0);
    ``partitions``: variable op name -> (partitioner string, shard_sizes), the
    shards taking the variable's synchronizer.
    """
    strategy = strategy_pb2.Strategy(id="test")
    strategy.graph_config.replicas.extend(replicas)
    partitions = partitions or {}

    def fill(node, name, kind, args):
        node.var_name = name + ":0"
        if kind == "ps":
            sync = node.PSSynchronizer
            sync.reduction_destination = args["device"]
            sync.sync = args.get("sync", True)
            sync.staleness = args.get("staleness", 0)
            sync.local_replication = args.get("proxy", False)
        else:
            sync = node.AllReduceSynchronizer
            sync.SetInParent()
            sync.group = args.get("group", 0)
            sync.compressor = args.get("compressor", 0)
            sync.powersgd_rank = args.get("rank", 0)

    for kind, table in (("ps", ps or {}), ("ar", ar or {})):
        for name, args in table.items():
            node = strategy.node_config.add()
            fill(node, name, kind, args)
            if name in partitions:
                partitioner, sizes = partitions[name]
                node.partitioner = partitioner
                node.shard_sizes.extend(sizes)
                counts = partitioner.split(",")
                count = max(int(c) for c in counts) if all(c.isdigit() for c in counts) else 0
                for i in range(count if count > 1 else 0):   # malformed or unsplit: no part_config
                    fill(node.part_config.add(), "{}/part_{}".format(name, i), kind, args)
    return strategy

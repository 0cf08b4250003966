"""Partition: split variables into shards as the strategy says (work in progress in this session)."""
from autodist.errors import TransformError

__all__ = ["Partitioner"]


class Partitioner:
    name = "partition"

    def __init__(self, strategy):
        self.strategy = strategy
        self.partitions = {}

    def __call__(self, item):
        if any(node.partitioner for node in self.strategy.node_config):
            raise TransformError("partitioned variables are not supported yet", pass_name=self.name)
        return item

"""Partition: split variables into shards as the strategy says."""
import dataclasses
from typing import Dict, Tuple

from autodist.errors import TransformError

__all__ = ["Partitioner", "PartitionInfo"]


@dataclasses.dataclass(frozen=True)
class PartitionInfo:
    """How one variable was split.

    ``shards`` are the shard variables' op names (``"emb/part_0"``...), in
    order along ``axis`` with ``sizes`` rows each; ``slots`` maps each of the
    variable's optimizer slots (single-device op name) to its shards' op
    names; ``aliases`` maps tensors of the single-device graph that no longer
    exist (the variable's reads) to the tensors standing for them (the shards
    concatenated), for fetches.
    """

    var_op: str
    axis: int
    shards: Tuple[str, ...]
    sizes: Tuple[int, ...]
    slots: Dict[str, Tuple[str, ...]]
    aliases: Dict[str, str]


class Partitioner:
    name = "partition"

    def __init__(self, strategy):
        self.strategy = strategy
        self.partitions = {}

    def __call__(self, item):
        if any(node.partitioner for node in self.strategy.node_config):
            raise TransformError("partitioned variables are not supported yet", pass_name=self.name)
        return item

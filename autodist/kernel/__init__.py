"""The kernel: a captured single-device graph rewritten for one node of a job.

    graph_transformer  GraphTransformer: entries -> passes -> TransformResult
    analysis           what a single-device training graph is made of
    walks              ancestors, forward reach, resource handles: graph walks the runtime shares
    assignment         what one node makes of the strategy: replicas, variables, shared ops, keys
    partitioner        the partition pass (with partition_ops)
    replicator         the replicate pass (with device)
    synchronization    the sync_in_graph and sync_between_graph passes
    finalizer          the finalize pass (with initialization and broadcast)
    base, graph_def_edit, reshaper   what the passes share

The plan comes in through ``autodist.plan`` (the contract's entries, the
names); the kernel never imports ``autodist.strategies``, nor they it.
Modules are imported by path; importing the package imports nothing.
"""
__all__ = []

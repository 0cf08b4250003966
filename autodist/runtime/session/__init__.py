"""A node's distributed session: the rewritten graph on this node's server, and what runs through it.

    node           open_node_session: the graph transformed for this node, on its server, initialized
    distributed    DistributedSession: steps watched (WatchedCaller), close bounded
    fetch_mapping  FetchMapper: feeds split over replicas, fetches mapped back
    composites     IndexedSlices and SparseTensors in fetches and feeds
    run_plans      a repeated run signature mapped once, called through a TensorFlow callable
    micro_steps    which calls run a train op's micro-step twin (gradient accumulation)
    sync_ops       which calls wait for the other nodes (what a stall report counts)
    input_epochs   why a node's tf.data iterator ends an epoch sooner, said in its error
    function       ``ad.function``: TF2-style step functions through the session

Modules are imported by path; importing the package imports nothing.
"""
__all__ = []

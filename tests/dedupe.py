"""Cells a matrix leaves out because another of its cells runs the same code: which, and why.

Parallax all-reduces dense gradients and sends sparse ones to parameter
servers (``autodist/strategies/parallax.py``). On a model without sparse
gradients its plan is AllReduce's but for two arguments of its all-reduce
preset: the spec (AUTO, where AllReduce() says NCCL), which the kernel reads
only to pick NCCL on GPUs (``Collectives.hint``: a ring on CPUs either way),
and no bucket size (AllReduce() closes a group at 16 MiB, which no variable of
the matrices' models comes near). On the matrices' CPU replicas the two plans
are the same graph, so the same code and numbers:
``tests/strategies/test_builder_parallax.py`` proves the plans equal but for
the spec for any dense variables under the bucket size,
``tests/kernel/synchronization/test_kernel_compressors.py`` that the spec is a
ring on CPUs, and ``tests/equivalence/test_parallax_cells.py`` that every model
a matrix calls dense has no sparse gradient (and every one it calls sparse
has one). So a matrix runs Parallax on its sparse models only.
"""

#: builder -> the builder whose plan it makes on a model without sparse gradients (on CPUs, below 16 MiB a group)
SAME_PLAN_WITHOUT_SPARSE = {"Parallax": "AllReduce"}


def builders_for(builders, sparse):
    """``builders``, less those that plan a model without sparse gradients (``sparse`` False) as another of them."""
    return [b for b in builders if sparse or SAME_PLAN_WITHOUT_SPARSE.get(b) not in builders]


def without_spec(strategy):
    """``strategy``'s message, its id and every all-reduce's spec cleared: what the kernel builds on CPU replicas."""
    proto = type(strategy.proto)()
    proto.CopyFrom(strategy.proto)
    proto.id = ""
    for node in proto.node_config:
        if node.HasField("AllReduceSynchronizer"):
            node.AllReduceSynchronizer.ClearField("spec")
    return proto

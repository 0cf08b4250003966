"""GraphTransformer: the captured single-device GraphItem -> this node's distributed GraphItem.

    item --partition--> item --(plan)--> replicate --> sync_in_graph --> sync_between_graph --> finalize

Every pass is ``GraphItem -> GraphItem`` and leaves its input alone. The plan
is made once, from the partitioned single-device graph, the compiled strategy
and this node's place in the job, and configures the passes after it. A pass
that fails raises ``TransformError`` naming itself and the passes before it.
"""
import dataclasses
from typing import Callable, List

from autodist.errors import AutoDistError, TransformError
from autodist.kernel.analysis import analyze
from autodist.kernel.finalizer import Finalizer
from autodist.kernel.partitioner import Partitioner
from autodist.kernel.plan import NodeContext, Plan, build_plan
from autodist.kernel.replicator import Replicator
from autodist.kernel.synchronization import SyncBetweenGraph, SyncInGraph

__all__ = ["GraphTransformer", "TransformResult", "run_passes"]


@dataclasses.dataclass
class TransformResult:
    original: object        # the captured single-device GraphItem
    partitioned: object     # after the partition pass (the original when nothing is split)
    item: object            # this node's distributed GraphItem (GraphDef-backed until used)
    plan: Plan
    partitions: dict        # variable op name -> PartitionInfo, for variables that were split


def run_passes(item, passes: List[Callable], done=()):
    """Apply ``passes`` in order; a failure names the pass and those before it."""
    done = list(done)
    for p in passes:
        name = getattr(p, "name", getattr(p, "__name__", type(p).__name__))
        try:
            item = p(item)
        except TransformError as e:
            if e.pass_name and e.passes_done:
                raise
            raise TransformError(e.problem, pass_name=e.pass_name or name, variable=e.variable, op=e.op,
                                 passes_done=done) from e
        except AutoDistError:
            raise
        except Exception as e:  # a TensorFlow or protobuf error inside a pass
            raise TransformError("{}: {}".format(type(e).__name__, e), pass_name=name, passes_done=done) from e
        done.append(name)
    return item, done


class GraphTransformer:
    """Transform a captured GraphItem for one node of a job, under a compiled strategy."""

    def __init__(self, strategy, node: NodeContext):
        self.strategy = strategy
        self.node = node

    def transform(self, item):
        partitioner = Partitioner(self.strategy)
        partitioned, done = run_passes(item, [partitioner])
        try:
            analysis = analyze(partitioned)
            plan = build_plan(analysis, self.strategy, self.node)
        except TransformError as e:
            raise TransformError(e.problem, pass_name=e.pass_name or "plan", variable=e.variable, op=e.op,
                                 passes_done=done) from e
        passes = [Replicator(plan), SyncInGraph(plan), SyncBetweenGraph(plan), Finalizer(plan)]
        result, _ = run_passes(partitioned, passes, done)
        return TransformResult(original=item, partitioned=partitioned, item=result, plan=plan,
                               partitions=partitioner.partitions)

"""GraphTransformer: the captured single-device GraphItem -> this node's distributed GraphItem.

    strategy --read_entries--> entries
    item [--uneven_inputs] [--accumulate(k), k > 1] [--half_gradients, mixed precision] --partition(entries)--> item
         --assign(entries)--> replicate --> sync_in_graph --> sync_between_graph --> finalize

The strategy is read once (``contract.read_entries``). Every pass is
``GraphItem -> PassResult`` and leaves its input alone. The assignment is
made once, from the partitioned single-device graph, the entries and this
node's place in the job, and configures the passes after it. A pass that
fails raises ``TransformError`` naming itself and the passes before it.
"""
import dataclasses
from typing import Callable, List

from autodist.errors import AutoDistError, TransformError
from autodist.kernel.analysis import analyze
from autodist.kernel.assignment import STEP_NAME, Assignment, NodeContext, assign
from autodist.kernel.base import PassResult
from autodist.kernel.contract import read_entries
from autodist.kernel.accumulate import Accumulate
from autodist.kernel.finalizer import Finalizer
from autodist.capture.queries import half_gradient_dtypes
from autodist.kernel.half_gradients import HalfGradients
from autodist.kernel.partitioner import Partitioner
from autodist.kernel.replicator import Replicator
from autodist.kernel.synchronization import SyncBetweenGraph, SyncInGraph
from autodist.kernel.uneven_inputs import UnevenInputs, reads_ahead

__all__ = ["GraphTransformer", "TransformResult", "run_passes"]


@dataclasses.dataclass
class TransformResult:
    original: object        # the captured single-device GraphItem
    partitioned: object     # after the partition pass (the original when nothing is split)
    item: object            # this node's distributed GraphItem (GraphDef-backed until used)
    assignment: Assignment
    partitions: dict        # variable op name -> PartitionInfo, for variables that were split
    micro_steps: dict = dataclasses.field(default_factory=dict)   # train op -> its micro-step twin (accumulation)
    accumulation_steps: int = 1


def _name_of(p):
    return getattr(p, "name", getattr(p, "__name__", type(p).__name__))


def run_passes(item, passes: List[Callable], done=(), observe=None):
    """Apply ``passes`` in order; a failure names the pass and those before it.

    Returns a PassResult whose details are {pass name: its details}, in the
    order the passes ran. A pass may also return a bare GraphItem (no details).
    ``observe(name, item)``, if given, sees the item each pass returned
    (``autodist plan --dump-graphs`` writes them for TensorBoard).
    """
    done = list(done)
    details = {}
    for p in passes:
        name = _name_of(p)
        try:
            result = p(item)
        except TransformError as e:
            if e.pass_name and e.passes_done:
                raise
            raise TransformError(e.problem, pass_name=e.pass_name or name, variable=e.variable, op=e.op,
                                 passes_done=done) from e
        except AutoDistError:
            raise
        except Exception as e:  # a TensorFlow or protobuf error inside a pass
            raise TransformError("{}: {}".format(type(e).__name__, e), pass_name=name, passes_done=done) from e
        if not isinstance(result, PassResult):
            result = PassResult(result)
        item = result.item
        details[name] = result.details
        done.append(name)
        if observe is not None:
            observe(name, item)
    return PassResult(item, details)


class GraphTransformer:
    """Transform a captured GraphItem for one node of a job, under a compiled strategy."""

    def __init__(self, strategy, node: NodeContext, observe=None):
        self.strategy = strategy
        self.node = node
        self.observe = observe   # run_passes' observer, or None

    def transform(self, item):
        entries = read_entries(self.strategy)
        accumulating = entries.accumulation_steps > 1
        first = [UnevenInputs(entries)] if reads_ahead(item) else []   # AutoDist(uneven_inputs=...)
        first += [Accumulate(entries.accumulation_steps)] if accumulating else []
        half = half_gradient_dtypes(item)
        first += [HalfGradients(half)] if half else []
        partitioned = run_passes(item, first + [Partitioner(entries)], observe=self.observe)
        done = list(partitioned.details)
        try:
            assignment = assign(analyze(partitioned.item), entries, self.node, every_step=item.every_step_train_ops)
        except TransformError as e:
            raise TransformError(e.problem, pass_name=e.pass_name or STEP_NAME, variable=e.variable, op=e.op,
                                 passes_done=done) from e
        passes = [Replicator(assignment), SyncInGraph(assignment),
                  SyncBetweenGraph(assignment, accumulating=accumulating), Finalizer(assignment)]
        result = run_passes(partitioned.item, passes, done, observe=self.observe)
        return TransformResult(original=item, partitioned=partitioned.item, item=result.item, assignment=assignment,
                               partitions=partitioned.details[Partitioner.name],
                               micro_steps=partitioned.details.get(Accumulate.name, {}),
                               accumulation_steps=entries.accumulation_steps)

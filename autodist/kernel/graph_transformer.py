"""GraphTransformer: the captured single-device GraphItem -> this node's distributed GraphItem.

    strategy --read_entries--> entries
    item [--uneven_inputs] [--loss_shares, float16 gradients] [--accumulate(k), k > 1]
         [--half_gradients, mixed precision] --partition(entries)--> item
         --assign(entries)--> replicate --> sync_in_graph --> sync_between_graph
         [--sync_statistics, batch norm] --> finalize

The order is declared once, in :data:`PIPELINE`, and checked against what
each pass ``requires`` (``base.check_order``). The strategy is read once
(``contract.read_entries``). Every pass is ``GraphItem -> PassResult`` and
leaves its input alone. The assignment is a step of its own: made once, from
the partitioned single-device graph, the entries and this node's place in
the job, it rewrites nothing and configures the passes after it. A pass that
fails raises ``TransformError`` naming itself and the passes before it.
"""
import dataclasses
from typing import Callable, Iterable

from autodist.errors import AutoDistError, TransformError
from autodist.kernel.accumulate import Accumulate
from autodist.kernel.assignment import Assign, Assignment, NodeContext
from autodist.kernel.base import PassResult
from autodist.kernel.finalizer import Finalizer
from autodist.capture.batch_norm import mean_on_read_variables, statistics_markers
from autodist.capture.datasets.uneven import half_wire_dtypes, reads_ahead
from autodist.capture.queries import half_gradient_dtypes
from autodist.kernel.half_gradients import HalfGradients
from autodist.kernel.loss_shares import LossShares
from autodist.kernel.partitioner import Partitioner
from autodist.kernel.replicator import Replicator
from autodist.kernel.synchronization import SyncBetweenGraph, SyncInGraph
from autodist.kernel.synchronization.statistics import SyncStatistics
from autodist.kernel.uneven_inputs import UnevenInputs
from autodist.ir.utils import gc_paused
from autodist.plan.contract import read_entries

__all__ = ["GraphTransformer", "TransformResult", "run_passes", "PIPELINE"]


@dataclasses.dataclass
class TransformResult:
    original: object        # the captured single-device GraphItem
    partitioned: object     # after the partition pass (the original when nothing is split)
    item: object            # this node's distributed GraphItem (GraphDef-backed until used)
    assignment: Assignment
    partitions: dict        # variable op name -> PartitionInfo, for variables that were split
    micro_steps: dict = dataclasses.field(default_factory=dict)   # train op -> its micro-step twin (accumulation)
    accumulation_steps: int = 1
    on_read: dict = dataclasses.field(default_factory=dict)   # per-replica statistic -> its mean-on-read tensor


@dataclasses.dataclass(frozen=True)
class _Plan:
    """What the passes are made from: the strategy's entries, this node, the captured item, the half
    dtypes its gradients travel in (``half_gradients``; empty: none), whether some are computed in
    float16 (``loss_shares``), and the batch statistics to synchronize or to read as a mean
    (``sync_statistics``: marker op names, per-replica statistics)."""

    entries: object
    node: NodeContext
    item: object
    half: dict
    computes_half: bool = False
    markers: tuple = ()
    on_read: tuple = ()

    @property
    def accumulating(self):
        return self.entries.accumulation_steps > 1


#: The kernel's steps, in the order they run: a pass class and how its pass is made from the plan
#: (``_Plan``) and the details of the steps before it, by name. A maker returning None skips its
#: step: uneven_inputs, loss_shares, accumulate, half_gradients and sync_statistics run only when the job
#: needs them.
PIPELINE = (
    (UnevenInputs, lambda plan, found: UnevenInputs(plan.entries) if reads_ahead(plan.item) else None),
    (LossShares, lambda plan, found: LossShares(len(plan.entries.replicas)) if plan.computes_half else None),
    (Accumulate, lambda plan, found: Accumulate(plan.entries.accumulation_steps) if plan.accumulating else None),
    (HalfGradients, lambda plan, found: HalfGradients(plan.half) if plan.half else None),
    (Partitioner, lambda plan, found: Partitioner(plan.entries)),
    (Assign, lambda plan, found: Assign(plan.entries, plan.node, every_step=plan.item.every_step_train_ops)),
    (Replicator, lambda plan, found: Replicator(found[Assign.name])),
    (SyncInGraph, lambda plan, found: SyncInGraph(found[Assign.name])),
    (SyncBetweenGraph, lambda plan, found: SyncBetweenGraph(found[Assign.name], accumulating=plan.accumulating)),
    (SyncStatistics, lambda plan, found: SyncStatistics(found[Assign.name], plan.markers, plan.on_read)
     if plan.markers or plan.on_read else None),
    (Finalizer, lambda plan, found: Finalizer(found[Assign.name])),
)


def _name_of(p):
    return getattr(p, "name", getattr(p, "__name__", type(p).__name__))


def run_passes(item, passes: Iterable[Callable], done=(), observe=None, found=None):
    """Apply ``passes`` in order; a failure names the pass and those before it.

    Returns a PassResult whose details are {pass name: its details}, in the
    order the passes ran (``found``, if given, is that dict, filled as they
    run: a pipeline may make a pass from the details of the passes before it).
    A pass may also return a bare GraphItem (no details). ``observe(name,
    item)``, if given, sees the item each rewriting pass returned (``autodist
    plan --dump-graphs`` writes them for TensorBoard).
    """
    done = list(done)
    details = found if found is not None else {}
    for p in passes:
        name = _name_of(p)
        result = _run_one(p, name, item, done)
        item = result.item
        details[name] = result.details
        if getattr(p, "rewrites", True):
            done.append(name)
            if observe is not None:
                observe(name, item)
    return PassResult(item, details)


def _run_one(p, name, item, done):
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
    return result if isinstance(result, PassResult) else PassResult(result)


class GraphTransformer:
    """Transform a captured GraphItem for one node of a job, under a compiled strategy."""

    def __init__(self, strategy, node: NodeContext, observe=None):
        self.strategy = strategy
        self.node = node
        self.observe = observe   # run_passes' observer, or None

    def transform(self, item):
        entries = read_entries(self.strategy)
        plan = _Plan(entries, self.node, item, half_wire_dtypes(item), bool(half_gradient_dtypes(item)),
                     tuple(op.name for op in statistics_markers(item.graph)), tuple(mean_on_read_variables(item.graph)))
        found, seen = {}, {}

        def passes():   # made one by one: the passes after the assignment are made from it
            for _, make in PIPELINE:
                made = make(plan, found)
                if made is not None:
                    yield made

        def observe(name, new_item):
            seen[name] = new_item
            if self.observe is not None:
                self.observe(name, new_item)

        # The passes build hundreds of thousands of objects that all stay alive; the cyclic collector would
        # scan the growing heap again and again for nothing (a 3000-variable transform: 36 -> 11 s).
        with gc_paused():
            result = run_passes(item, passes(), observe=observe, found=found)
        return TransformResult(original=item, partitioned=seen[Partitioner.name], item=result.item,
                               assignment=found[Assign.name], partitions=found[Partitioner.name],
                               micro_steps=found.get(Accumulate.name, {}),
                               accumulation_steps=plan.entries.accumulation_steps,
                               on_read=found.get(SyncStatistics.name, {}))

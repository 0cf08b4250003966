"""The assignment of one node: its replicas, and where and how each variable is kept in sync.

Made once from the analysed (partitioned) single-device graph, the
strategy's entries (``contract.read_entries``) and this node's place in the
job; every pass after partitioning reads its decisions from here, so each
node of a job derives the same names, keys and devices.

    replicas   the strategy's replica devices; this node runs the ones on its task
    ps vars    one copy on their server, shared by every node; written by one
               apply per step (sync: the chief's; async/stale: each node's own)
    ar vars    mirrored: one copy per replica, every replica applies the
               all-reduced mean
    mirrored   everything else that is state (optimizer counters, slots of
               all-reduced variables, batch-norm statistics): one copy per replica

(The *plan* is the Strategy a builder makes; this is what one node makes of it.)
"""
import dataclasses
import functools
from typing import Dict, FrozenSet, List, Union

from autodist.errors import TransformError
from autodist.kernel.analysis import analyze
from autodist.kernel.base import Pass, PassResult
from autodist.kernel.walks import ancestors
from autodist.plan import names
from autodist.plan.contract import AllReduceEntry, PSEntry

__all__ = ["NodeContext", "Replica", "VariableAssignment", "Assignment", "assign", "Assign", "STEP_NAME"]

#: How errors of this step name it (it runs between the partition and the replicate pass).
STEP_NAME = "assign"


@dataclasses.dataclass(frozen=True)
class NodeContext:
    """This process's place in the job: its task, the chief's task, how many tasks, the job id."""

    job_id: str
    task_index: int
    num_tasks: int
    chief_task: int = 0
    collective_key_base: int = 0   # 0: derived from the job id

    @property
    def is_chief(self):
        return self.task_index == self.chief_task


@dataclasses.dataclass(frozen=True)
class Replica:
    local_index: int
    global_index: int
    device: str
    host_cpu: str

    @property
    def prefix(self):
        return names.replica_prefix(self.local_index)


@dataclasses.dataclass(frozen=True)
class VariableAssignment:
    """A variable with a gradient and the strategy's synchronizer for it."""

    op_name: str
    sparse: bool
    synchronizer: Union[PSEntry, AllReduceEntry]

    @property
    def kind(self):
        """"ps" or "ar"."""
        return self.synchronizer.kind


@dataclasses.dataclass
class Assignment:
    node: NodeContext
    analysis: object
    replicas: List[Replica]        # every replica of the job, in strategy order
    local: List[Replica]           # this node's replicas, in strategy order
    vars: Dict[str, VariableAssignment]  # variable op name -> assignment, for variables with a gradient
    shared_ops: FrozenSet[str]     # ops kept once (parameter-server variables and slots)
    shared_devices: Dict[str, str]  # shared op -> device
    ps_state: Dict[str, str]       # ps variable or slot op -> the ps variable it belongs to
    key_base: int                  # collective instance keys of this job start here
    group_key: int
    group: str = ""                # the synchronization group this view covers ("": the whole step)
    every_step: FrozenSet[str] = frozenset()   # train ops that update at every call (when others accumulate)

    @property
    def analysis_graph(self):
        return self.analysis.graph

    @property
    def num_replicas(self):
        return len(self.replicas)

    @property
    def ps_vars(self):
        return [v for v in self.vars.values() if v.kind == "ps"]

    @property
    def ar_vars(self):
        return [v for v in self.vars.values() if v.kind == "ar"]

    @property
    def mirrored_vars(self):
        """Variable op names that get one copy per replica."""
        return [name for name in self.analysis.variables if name not in self.ps_state]

    @functools.cached_property
    def chief_replica(self):
        """The replica that initializes mirrored state and broadcasts it: the chief's first."""
        for replica in self.replicas:
            if names.task_of(replica.device) == self.node.chief_task:
                return replica
        raise TransformError("the chief (task {}) runs no replica".format(self.node.chief_task))

    def is_shared(self, op_name):
        return op_name in self.shared_ops

    def sync_groups(self, accumulating):
        """``[(view, train ops)]``: what synchronizes together, and the train ops that wait for it.

        One group, this assignment, unless gradients are ``accumulating`` and
        some train ops update at every call (Keras ``fit``'s metric state):
        those get a view of their own (its own job id for shared names, its own
        name scopes and collective keys), so that a micro-step runs their
        synchronization and not the accumulated ones'.
        """
        trains = list(self.analysis.train_ops)
        every = [t for t in trains if t in self.every_step]
        if not accumulating or not every:
            return [(self, trains)]
        updated = _updated_by(self.analysis, every)
        rest = [t for t in trains if t not in self.every_step]
        return [(self._view(set(self.vars) - updated, "", 0), rest),
                (self._view(updated, "every-step", names.EVERY_STEP_KEY_OFFSET), every)]

    def _view(self, var_ops, group, key_offset):
        node = self.node if not group else dataclasses.replace(self.node, job_id=self.node.job_id + "/" + group)
        for var_op in var_ops:
            sync = self.vars[var_op].synchronizer
            if group and sync.kind == "ps" and (not sync.sync or sync.staleness):
                raise TransformError("is updated at every call while other gradients accumulate; it needs a "
                                     "synchronous strategy (sync=True, staleness=0)", pass_name=STEP_NAME,
                                     variable=var_op)
        return dataclasses.replace(self, node=node, vars={v: a for v, a in self.vars.items() if v in var_ops},
                                   key_base=self.key_base + key_offset, group=group)


def _updated_by(analysis, train_ops):
    """The variables (with gradients) the ops ``train_ops`` wait for update."""
    graph = analysis.graph
    reached = {op.name for op in ancestors([graph.get_operation_by_name(t) for t in train_ops])}
    return {v for v, update in analysis.update_ops.items() if update in reached}


def _task(device, what, variable=None):
    try:
        return names.task_of(device)
    except ValueError as e:
        raise TransformError("{}: {}".format(what, e), pass_name=STEP_NAME, variable=variable) from None


def _replicas(devices, node):
    replicas, local = [], []
    for index, device in enumerate(devices):
        task = _task(device, "replica device")
        if task >= node.num_tasks:
            raise TransformError("replica '{}' names task {}, but the job has {} tasks"
                                 .format(device, task, node.num_tasks))
        replica = Replica(local_index=len(local) if task == node.task_index else -1,
                          global_index=index, device=device, host_cpu=names.host_cpu(task))
        replicas.append(replica)
        if task == node.task_index:
            local.append(replica)
    if not local:
        raise TransformError("this node (task {}) runs none of the strategy's replicas {}"
                             .format(node.task_index, list(devices)))
    return replicas, local


def _variable(var_op, entry, sparse):
    sync = entry.synchronizer
    if sync is None:
        raise TransformError("has no synchronizer in the strategy", pass_name=STEP_NAME, variable=var_op)
    if sync.kind == "ps":
        if not sync.destination:
            raise TransformError("has a PSSynchronizer without reduction_destination",
                                 pass_name=STEP_NAME, variable=var_op)
        _task(sync.destination, "reduction_destination", variable=var_op)
    return VariableAssignment(op_name=var_op, sparse=sparse, synchronizer=sync)


def _ps_state(analysis, variables):
    """{parameter-server variable, one of its slots or shared state it keeps: the parameter-server variable}."""
    ps_state = {}
    for var in variables.values():
        if var.kind != "ps":
            continue
        for owned in (var.op_name,) + analysis.owned_state(var.op_name):
            if owned in variables and variables[owned].kind == "ar":
                raise TransformError("is all-reduced but is also state of parameter-server variable '{}'"
                                     .format(var.op_name), pass_name=STEP_NAME, variable=owned)
            ps_state[owned] = var.op_name
    return ps_state


def _check_couplings(analysis, variables):
    """Coupled variables (one's update reads another's gradient) must be applied by the same replicas.

    Under one synchronizer that holds: all-reduced variables are applied by
    every replica from the same mean gradients, synchronous parameter-server
    variables by the chief's first replica from the aggregated ones.
    """
    for group in analysis.couplings:
        kinds = {variables[v].kind for v in group}
        names = ", ".join("'{}' ({})".format(v, variables[v].kind) for v in sorted(group))
        if len(kinds) > 1:
            raise TransformError("the optimizer couples these variables' updates (e.g. global_clipnorm, or a loss "
                                 "scale that skips a step when any gradient is not finite), but the strategy "
                                 "synchronizes them differently: {}; plan them with one kind of synchronizer "
                                 "(AllReduce, or a parameter-server builder)".format(names), pass_name=STEP_NAME)
        if kinds == {"ps"}:
            modes = {(variables[v].synchronizer.sync, variables[v].synchronizer.staleness) for v in group}
            if len(modes) > 1:
                raise TransformError("the optimizer couples these variables' updates, but the strategy gives them "
                                     "different sync/staleness settings: {}; give them the same".format(names),
                                     pass_name=STEP_NAME)


def assign(analysis, entries, node, every_step=()):
    """The assignment of ``node`` for the analysed graph under the strategy's ``entries`` (``every_step``:
    train ops that update at every call, ``GraphItem.every_step_train_ops``)."""
    replicas, local = _replicas(entries.replicas, node)
    synchronized = entries.synchronized
    variables = {}
    for var_op in analysis.grad_tensors:
        if var_op not in synchronized:
            raise TransformError("has a gradient but no entry in the strategy; build the strategy "
                                 "from this graph", pass_name=STEP_NAME, variable=var_op)
        variables[var_op] = _variable(var_op, synchronized[var_op], analysis.sparse[var_op])
    _check_couplings(analysis, variables)
    ps_state = _ps_state(analysis, variables)
    shared_devices = {}
    for owned, owner in ps_state.items():
        for op in analysis.variables[owned].creation_ops:
            shared_devices[op] = variables[owner].synchronizer.destination
    node_cpu = names.host_cpu(node.task_index)
    for op in analysis.input_pipeline:
        shared_devices.setdefault(op, node_cpu)
    base = names.key_base(node.job_id, node.collective_key_base)
    return Assignment(node=node, analysis=analysis, replicas=replicas, local=local, vars=variables,
                      shared_ops=frozenset(shared_devices), shared_devices=shared_devices, ps_state=ps_state,
                      key_base=base, group_key=names.group_key(base), every_step=frozenset(every_step))


class Assign(Pass):
    """The assignment step: it rewrites nothing; its details are this node's :class:`Assignment` of the
    partitioned graph, which configures every pass after it (``graph_transformer.PIPELINE``)."""

    name = STEP_NAME
    requires = ("partition",)
    rewrites = False

    def __init__(self, entries, node, every_step=()):
        self.entries = entries
        self.node = node
        self.every_step = every_step

    def __call__(self, item):
        return PassResult(item, assign(analyze(item), self.entries, self.node, every_step=self.every_step))

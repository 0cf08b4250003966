"""The transformation plan of one node: who holds what, and which names passes create.

Built once from the (partitioned) single-device GraphItem, the compiled
strategy and this node's place in the job; every pass reads its decisions
from here, so each node of a job derives the same names, keys and devices.

    replicas   the strategy's replica devices; this node runs the ones on its task
    ps vars    one copy on their server, shared by every node; written by one
               apply per step (sync: the chief's; async/stale: each node's own)
    ar vars    mirrored: one copy per replica, every replica applies the
               all-reduced mean
    mirrored   everything else that is state (optimizer counters, slots of
               all-reduced variables, batch-norm statistics): one copy per replica
"""
import dataclasses
import functools
import hashlib
import re
from typing import Dict, FrozenSet, List

from autodist.errors import TransformError

__all__ = ["NodeContext", "Replica", "VarPlan", "Plan", "build_plan", "replica_prefix", "host_cpu", "REPLICA_PREFIX",
           "KEY_WINDOW"]

REPLICA_PREFIX = "AutoDist-Replica-"
_TASK = re.compile(r"^/job:worker/task:(\d+)/device:([A-Z]+):(\d+)$")


def replica_prefix(index):
    return "{}{}/".format(REPLICA_PREFIX, index)


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
        return replica_prefix(self.local_index)


@dataclasses.dataclass(frozen=True)
class VarPlan:
    op_name: str
    kind: str                      # "ps" or "ar"
    sparse: bool
    device: str = ""               # ps: the server device
    sync: bool = True
    staleness: int = 0
    proxy: bool = False
    group: int = 0                 # ar: fused collectives share a group
    compressor: int = 0            # ar: AllReduceSynchronizer.Compressor
    powersgd_rank: int = 1
    spec: int = 0


@dataclasses.dataclass
class Plan:
    node: NodeContext
    analysis: object
    replicas: List[Replica]        # every replica of the job, in strategy order
    local: List[Replica]           # this node's replicas, in strategy order
    vars: Dict[str, VarPlan]       # variable op name -> plan, for variables with a gradient
    shared_ops: FrozenSet[str]     # ops kept once (parameter-server variables and slots)
    shared_devices: Dict[str, str]  # shared op -> device
    ps_state: Dict[str, str]       # ps variable or slot op -> the ps variable it belongs to
    key_base: int                  # collective instance keys of this job start here
    group_key: int

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

    def host_cpu(self, task):
        return host_cpu(task)

    @functools.cached_property
    def chief_replica(self):
        """The replica that initializes mirrored state and broadcasts it: the chief's first."""
        for replica in self.replicas:
            if _task_of(replica.device) == self.node.chief_task:
                return replica
        raise TransformError("the chief (task {}) runs no replica".format(self.node.chief_task))

    def is_shared(self, op_name):
        return op_name in self.shared_ops


def host_cpu(task):
    """The CPU device of task ``task``."""
    return "/job:worker/task:{}/device:CPU:0".format(task)


def _task_of(device):
    match = _TASK.match(device)
    if not match:
        raise TransformError("replica device '{}' is not a compiled device name "
                             "(/job:worker/task:<k>/device:<TYPE>:<i>); compile the strategy first"
                             .format(device))
    return int(match.group(1))


def _replicas(strategy, node):
    replicas, local = [], []
    for index, device in enumerate(strategy.graph_config.replicas):
        task = _task_of(device)
        if task >= node.num_tasks:
            raise TransformError("replica '{}' names task {}, but the job has {} tasks"
                                 .format(device, task, node.num_tasks))
        replica = Replica(local_index=len(local) if task == node.task_index else -1,
                          global_index=index, device=device,
                          host_cpu=host_cpu(task))
        replicas.append(replica)
        if task == node.task_index:
            local.append(replica)
    if not local:
        raise TransformError("this node (task {}) runs none of the strategy's replicas {}"
                             .format(node.task_index, list(strategy.graph_config.replicas)))
    return replicas, local


def _var_plan(var_op, config, sparse):
    kind = config.WhichOneof("synchronizer")
    if kind == "PSSynchronizer":
        ps = config.PSSynchronizer
        if not ps.reduction_destination:
            raise TransformError("has a PSSynchronizer without reduction_destination",
                                 pass_name="plan", variable=var_op)
        _task_of(ps.reduction_destination)
        return VarPlan(op_name=var_op, kind="ps", sparse=sparse, device=ps.reduction_destination,
                       sync=ps.sync, staleness=ps.staleness, proxy=ps.local_replication)
    if kind == "AllReduceSynchronizer":
        ar = config.AllReduceSynchronizer
        return VarPlan(op_name=var_op, kind="ar", sparse=sparse, group=ar.group, compressor=ar.compressor,
                       powersgd_rank=ar.powersgd_rank or 1, spec=ar.spec)
    raise TransformError("has no synchronizer in the strategy", pass_name="plan", variable=var_op)


def _node_configs(strategy):
    """Strategy nodes by variable op name; partitioned variables contribute their shards."""
    configs = {}
    for node in strategy.node_config:
        for entry in (node.part_config if node.part_config else [node]):
            configs[entry.var_name.split(":")[0]] = entry
    return configs


KEY_WINDOW = 100000


def _key_base(node):
    """First collective key of the job: instance keys of jobs sharing servers must not meet.

    Each job's servers normally live and die with it; long-lived servers that
    run many jobs (tests, external orchestration) should pass distinct
    ``collective_key_base`` values, which rule collisions out.
    """
    if node.collective_key_base:
        return node.collective_key_base
    digest = int(hashlib.sha256(node.job_id.encode()).hexdigest()[:8], 16)
    return KEY_WINDOW * (1 + digest % 20000)


def build_plan(analysis, strategy, node):
    """The plan of ``node`` for the analysed graph under the compiled ``strategy``."""
    replicas, local = _replicas(strategy, node)
    configs = _node_configs(strategy)
    plans = {}
    for var_op in analysis.grad_tensors:
        if var_op not in configs:
            raise TransformError("has a gradient but no entry in the strategy; build the strategy "
                                 "from this graph", pass_name="plan", variable=var_op)
        plans[var_op] = _var_plan(var_op, configs[var_op], analysis.sparse[var_op])
    ps_state = {}
    for plan in plans.values():
        if plan.kind != "ps":
            continue
        for owned in (plan.op_name,) + analysis.slots[plan.op_name]:
            if owned in ps_state and ps_state[owned] != plan.op_name:
                raise TransformError("is a slot of both '{}' and '{}'".format(ps_state[owned], plan.op_name),
                                     pass_name="plan", variable=owned)
            if owned in plans and plans[owned].kind == "ar":
                raise TransformError("is all-reduced but is also state of parameter-server variable '{}'"
                                     .format(plan.op_name), pass_name="plan", variable=owned)
            ps_state[owned] = plan.op_name
    shared_devices = {}
    for owned, owner in ps_state.items():
        for op in analysis.variables[owned].creation_ops:
            shared_devices[op] = plans[owner].device
    node_cpu = host_cpu(node.task_index)
    for op in analysis.input_pipeline:
        shared_devices.setdefault(op, node_cpu)
    base = _key_base(node)
    return Plan(node=node, analysis=analysis, replicas=replicas, local=local, vars=plans,
                shared_ops=frozenset(shared_devices), shared_devices=shared_devices, ps_state=ps_state,
                key_base=base, group_key=base // KEY_WINDOW)

"""Which node each task of ``srun --ntasks`` runs on, for every task distribution of Slurm.

    SLURM_STEP_NODELIST        the step's nodes in Slurm's order, node id 0, 1, ... (else SLURM_JOB_NODELIST)
    SLURM_STEP_TASKS_PER_NODE  the step's tasks on each of those nodes: "1(x3)", "2,1"
    SLURM_DISTRIBUTION         block (the default), cyclic, plane=<n> or arbitrary, ":<sockets>..." after it
    SLURM_PROCID, SLURMD_NODENAME, SLURM_NODEID    this task's rank, its node, that node's id

autodist runs one process per node, which drives every device of the node,
so a node with several tasks of the step is refused at once, by name (every
task reads the same counts and stops with the same message). With one task
a node, block, cyclic and plane put task k on node k; ``arbitrary`` (``srun -m
arbitrary -w ...``, ``SLURM_HOSTFILE``) puts the tasks in the order it was
given, which no task's environment tells: every task then sends its rank
and node to the task on node 0 when it starts (``runtime.join.rendezvous``),
which answers with everyone's. A task that finds itself on another node than
the distribution says (``SLURMD_NODENAME``) stops, naming both, rather than
serve at an address the others do not reach it at.

Measured with Slurm 22.05 on ``autodist cluster up --slurm``: ``srun -N2 -n2
-m arbitrary -w <node 1>,<node 0>`` runs task 0 on node 1; ``-m cyclic`` with
the same ``-w`` runs it on node 0; both set ``SLURM_STEP_TASKS_PER_NODE=1(x2)``.
"""
import dataclasses
import re
from typing import Optional, Tuple

from autodist.errors import ResourceSpecError
from autodist.spec.convert import expand_hostlist

__all__ = ["SlurmTasks", "slurm_tasks", "tasks_per_node"]

_COUNT = re.compile(r"(\d+)(?:\(x(\d+)\))?\Z")


@dataclasses.dataclass(frozen=True)
class SlurmTasks:
    """The step's tasks: ``hosts[k]`` is task k's node (None under ``arbitrary``: exchanged at the start)."""

    rank: int
    size: int
    hosts: Optional[Tuple[str, ...]]
    first: str                  # node 0, whose task serves the start-up exchange under ``arbitrary``
    own: Optional[str]          # this task's node (SLURMD_NODENAME)
    serves_exchange: bool


def tasks_per_node(text, key):
    """``"2(x3),1"`` -> ``[2, 2, 2, 1]`` (Slurm's compressed counts)."""
    counts = []
    for part in text.split(","):
        match = _COUNT.match(part.strip())
        if not match:
            raise ResourceSpecError("expected Slurm's tasks per node such as 1(x3) or 2,1, got {!r}".format(text),
                                    key=key)
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    return counts


def _counts(environ, hosts, size):
    """The step's tasks on each node; without SLURM_STEP_TASKS_PER_NODE, spread evenly when they can be."""
    text = environ.get("SLURM_STEP_TASKS_PER_NODE", "").strip()
    if not text:
        if size % len(hosts):
            raise ResourceSpecError("{} tasks over {} nodes, and SLURM_STEP_TASKS_PER_NODE does not say how they are "
                                    "spread: start one task per node (srun --ntasks-per-node=1)".format(
                                        size, len(hosts)), key="SLURM_NTASKS")
        return [size // len(hosts)] * len(hosts)
    counts = tasks_per_node(text, "SLURM_STEP_TASKS_PER_NODE")
    if len(counts) != len(hosts) or sum(counts) != size:
        raise ResourceSpecError("{} gives {} tasks on {} nodes, but the step has {} tasks on {} nodes ({})".format(
            text, sum(counts), len(counts), size, len(hosts), ", ".join(hosts)), key="SLURM_STEP_TASKS_PER_NODE")
    return counts


def slurm_tasks(environ, number):
    """This task's ``SlurmTasks`` (``number(name)``: the whole number in the variable ``name``)."""
    source = "SLURM_STEP_NODELIST" if environ.get("SLURM_STEP_NODELIST") else "SLURM_JOB_NODELIST"
    hosts = expand_hostlist(environ.get(source), source)
    size, rank = number("SLURM_NTASKS"), number("SLURM_PROCID")
    crowded = ["{} ({} tasks)".format(h, c) for h, c in zip(hosts, _counts(environ, hosts, size)) if c > 1]
    if crowded:
        raise ResourceSpecError("several processes of the job run on {}: autodist runs one process per node, which "
                                "drives every device of the node (start one task per node: srun "
                                "--ntasks-per-node=1)".format(", ".join(crowded)), key="SLURM_NTASKS")
    own = environ.get("SLURMD_NODENAME", "").strip() or None
    node_id = environ.get("SLURM_NODEID", "").strip()
    serves = node_id == "0" if node_id else own == hosts[0]
    if environ.get("SLURM_DISTRIBUTION", "block").split(":")[0].strip() == "arbitrary":
        if own is None:
            raise ResourceSpecError("is not set: under srun's arbitrary distribution every task tells the others "
                                    "its node, which Slurm names in SLURMD_NODENAME", key="SLURMD_NODENAME")
        return SlurmTasks(rank, size, None, hosts[0], own, serves)
    if own is not None and own != hosts[rank]:
        raise ResourceSpecError("task {} runs on {}, and the {} distribution of nodes {} puts it on {}: start the "
                                "tasks with srun's block, cyclic or arbitrary distribution".format(
                                    rank, own, environ.get("SLURM_DISTRIBUTION", "block"), ", ".join(hosts),
                                    hosts[rank]), key="SLURMD_NODENAME")
    return SlurmTasks(rank, size, tuple(hosts), hosts[0], own, serves)

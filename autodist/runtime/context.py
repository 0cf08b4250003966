"""JobContext: one process's place in a running job.

The chief creates the job: it picks a job id, a TensorFlow server address for
every node and a working directory, writes the compiled strategy there, and
starts the other nodes with their JobContext in one environment variable,
``AUTODIST_JOB`` (JSON). ``AutoDist`` reads it once, when constructed; nothing
else in autodist looks at the environment.

A JobContext can also be given explicitly (``AutoDist(..., job=...)``) when
the servers are started by something else; then every node, the chief
included, attaches to the running servers and the chief writes the strategy
to ``strategy_path`` for the others to read.
"""
import dataclasses
import json
from typing import Dict, Optional

from autodist.spec.rules import task_order
from autodist.errors import LaunchError

__all__ = ["JobContext", "ENV_VAR", "launched_member", "chief_flags"]

ENV_VAR = "AUTODIST_JOB"


@dataclasses.dataclass(frozen=True)
class JobContext:
    """Where this process is: job id, its node, every node's server, the strategy file."""

    job_id: str
    address: str                       # this node's address in the resource spec
    servers: Dict[str, str]            # node address -> "host:port" of its TensorFlow server
    chief: str                         # the chief's address
    strategy_path: str                 # the compiled strategy, on this node
    workdir: str = ""                  # the job's working directory on this node
    strategy_wait: float = 120.0       # seconds a non-chief waits for the strategy file
    collective_key_base: int = 0       # first collective key (0: derived from the job id)
    serves: bool = False               # this process hosts its node's server (``runtime.launch.member_server``)

    @property
    def is_chief(self):
        return self.address == self.chief

    @property
    def addresses(self):
        """Node addresses in task order (``task_order``: identical on every node)."""
        return task_order(self.servers)

    @property
    def task_index(self):
        return self.addresses.index(self.address)

    @property
    def chief_task(self):
        return self.addresses.index(self.chief)

    @property
    def num_tasks(self):
        return len(self.servers)

    @property
    def target(self):
        """The session target of this node's server."""
        return "grpc://" + self.servers[self.address]

    def cluster_spec(self):
        """The TensorFlow cluster: one job "worker", task k = the k-th address in sorted order."""
        return {"worker": [self.servers[a] for a in self.addresses]}

    def for_node(self, address, strategy_path, workdir=""):
        """The context of another node of the same job."""
        return dataclasses.replace(self, address=address, strategy_path=strategy_path, workdir=workdir)

    def to_env(self):
        return {ENV_VAR: json.dumps(dataclasses.asdict(self), sort_keys=True)}

    @classmethod
    def from_env(cls, environ) -> Optional["JobContext"]:
        """The context in ``environ`` (a mapping), or None when this process was not launched by a job."""
        text = environ.get(ENV_VAR)
        if not text:
            return None
        try:
            data = json.loads(text)
            context = cls(**data)
        except (ValueError, TypeError) as e:
            raise LaunchError("{} is set but is not a job context ({}); it is set by the autodist chief "
                              "and should not be set by hand".format(ENV_VAR, e)) from e
        if context.address not in context.servers or context.chief not in context.servers:
            raise LaunchError("{}: node '{}' or chief '{}' is not among the job's servers {}".format(
                ENV_VAR, context.address, context.chief, sorted(context.servers)))
        return context


def launched_member(environ):
    """Whether ``environ`` is that of a process an autodist chief launched on another node.

    Such a process runs the user's script as a member of the chief's job
    (``AUTODIST_JOB`` is set and names a node other than the chief); every other
    process is, or would become, a chief. This is AutoDist's
    ``IS_AUTODIST_WORKER`` (``autodist.autodist``).
    """
    context = JobContext.from_env(environ)
    return context is not None and not context.is_chief


def chief_flags(environ):
    """AutoDist 0.7's ``{"IS_AUTODIST_CHIEF": ..., "IS_AUTODIST_WORKER": ...}`` of a process with ``environ``:
    a worker is a process an autodist chief launched (:func:`launched_member`), a chief any other."""
    worker = launched_member(environ)
    return {"IS_AUTODIST_CHIEF": not worker, "IS_AUTODIST_WORKER": worker}

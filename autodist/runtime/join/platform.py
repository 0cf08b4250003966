"""A job whose processes the platform starts: find the place, serve, wait for the others, hand over the plan.

    every process (the same command)        AutoDist()  or  autodist run train.py
        place    = places.resolve(environ)      TF_CONFIG, Slurm tasks, MPI, a spec file + AUTODIST_NODE_ADDRESS
        (some)   the processes' addresses        exchanged at the start (MPI, Slurm's arbitrary distribution)
        server   this node's, in this process    the job's cluster, task = the address's rank
        barrier  every server accepts            bounded, names whom it waits for
    the chief, at its first session         plans (AutoStrategy included), sends every other process
                                            the strategy, the spec, its calibration, its environment
                                            for the nodes (whether to restore) and its versions
    every other process                     receives them, checks the versions, plans nothing
    while training                          PeerWatch: the chief watches everyone, the others the chief
    at the end                              the others say "done" and wait for the chief to leave;
                                            the chief waits (bounded) for every "done", then leaves

One outcome: a process that fails or disappears makes every other one stop
within seconds with ``EXIT_RETRY`` (a status Kubernetes' TFJob ``ExitCode``
policy and Slurm retry; see docs/kubernetes.md), and the platform restarts
the whole job, which resumes from its checkpoint directory.
"""
import dataclasses
import hashlib
import json
import sys
import time

from autodist.runtime.context import JobContext
from autodist.runtime.join import exchange, peers, places
from autodist.runtime.join.exchange import JoinError
from autodist.runtime.join.places import EXIT_RETRY
from autodist.runtime.launch.server import start_in_process

__all__ = ["PlatformJob", "Handoff", "platform_versions", "check_versions", "EXIT_RETRY"]

HANDOFF_TIMEOUT = 600.0     # s a process waits for the chief's plan (it plans, may trace and calibrate first)
IDENTITY_TIMEOUT = 5.0      # s for one read of a peer's identity (a TensorFlow server answers in milliseconds)
DONE_TIMEOUT = 120.0        # s the chief waits at its end for the others to end theirs


def platform_versions():
    import tensorflow as tf
    from importlib import metadata
    try:
        own = metadata.version("autodist")
    except metadata.PackageNotFoundError:
        own = "unknown"
    return {"autodist": own, "tensorflow": tf.__version__}


@dataclasses.dataclass
class Handoff:
    """What the chief sends every other process."""

    strategy: bytes
    spec: dict
    calibration: object     # a dict, or None
    worker_env: dict
    versions: dict
    fingerprint: dict       # the graph the chief planned for (``capture.fingerprint``)

    def encode(self):
        return json.dumps({"strategy": self.strategy.hex(), "spec": self.spec, "calibration": self.calibration,
                           "worker_env": self.worker_env, "versions": self.versions,
                           "fingerprint": self.fingerprint}).encode()

    @classmethod
    def decode(cls, data):
        fields = json.loads(data.decode())
        return cls(bytes.fromhex(fields["strategy"]), fields["spec"], fields["calibration"], fields["worker_env"],
                   fields["versions"], fields["fingerprint"])


class PlatformJob:
    """This process's part in a platform-started job (module docstring)."""

    def __init__(self, place, spec, context, ready_timeout, say):
        self.place, self.spec, self.context = place, spec, context
        self._ready_timeout, self._say = ready_timeout, say
        self.watch = None

    @classmethod
    def from_environ(cls, environ, spec, ready_timeout, say):
        """Resolve this process's place (``spec``: the spec file's ResourceSpec, or None) and build the job."""
        from autodist.runtime.join.cluster import job_spec
        place = places.resolve(environ, spec)
        if place.servers is None:
            from autodist.runtime.join.rendezvous import exchange_addresses
            place = exchange_addresses(place, ready_timeout, say)
        spec = job_spec(place, spec)
        servers = {node.address: server for node, server in zip(_by_rank(spec, place), place.servers)}
        digest = hashlib.sha1(json.dumps(sorted(servers.items())).encode()).hexdigest()[:12]
        context = JobContext(job_id="join-" + digest, address=_by_rank(spec, place)[place.rank].address,
                             servers=servers, chief=spec.chief, strategy_path="")
        return cls(place, spec, context, ready_timeout, say)

    @property
    def names(self):
        """task index -> how messages call that process."""
        return {self.context.addresses.index(a): "{} ({})".format(a, s) for a, s in self.context.servers.items()}

    def start(self, node):
        """Start this node's server and wait until every process of the job has started its own."""
        from autodist.spec.cluster import cpu_count_of
        start_in_process(self.context.cluster_spec(), self.context.task_index, cpu_count_of(node), self.context.chief_task,
                         node.threads, node.cores)
        own, target, job_id = self.context.task_index, self.context.target, self.context.job_id
        exchange.announce(target, job_id, own, IDENTITY_TIMEOUT)   # the others' readiness reads it
        others = {t: s for t, s in enumerate(self.context.cluster_spec()["worker"]) if t != own}
        waited = peers.await_peers(others, self.names, self._ready_timeout, self._say, check=lambda task: (
            exchange.identity_problem(target, own, job_id, task, IDENTITY_TIMEOUT)))
        if others:
            self._say("{} of {} processes up ({:.1f} s): this is {}".format(
                len(others) + 1, len(others) + 1, waited, self.names[self.context.task_index]))
        watched = others if self.context.is_chief else {self.context.chief_task: others[self.context.chief_task]}
        self.watch = peers.PeerWatch({t: (self.names[t], s) for t, s in watched.items()}).start() if others else None

    def failure(self):
        return self.watch.failure() if self.watch is not None else None

    # -- the plan --------------------------------------------------------------------------
    def send_plan(self, handoff):
        """The chief: every other process gets ``handoff``."""
        own = self.context.task_index
        for task in range(self.context.num_tasks):
            if task != own:
                exchange.send(self.context.target, own, self.context.job_id, "plan/{}".format(task), own,
                              [handoff.encode()], HANDOFF_TIMEOUT)

    def receive_plan(self):
        """Another process: the chief's handoff, its versions checked against ours."""
        chief = self.context.chief_task
        data, = self._receive("plan/{}".format(self.context.task_index), chief, 1, HANDOFF_TIMEOUT,
                              "the chief's plan from {}".format(self.names[chief]))
        handoff = Handoff.decode(data)
        check_versions(handoff.versions, platform_versions(), self.names[self.context.task_index], self.names[chief])
        return handoff

    # -- the end ---------------------------------------------------------------------------
    def finish(self):
        """At a normal end: the others say done and wait for the chief to leave; the chief waits for them.
        True when every process of the job said it is done (for the chief; the others: when they said it)."""
        if self.watch is not None:
            self.watch.stop()
        chief, own = self.context.chief_task, self.context.task_index
        if self.context.num_tasks == 1:
            return True
        try:
            if own != chief:
                exchange.send(self.context.target, own, self.context.job_id, "done", chief, [b"done"], DONE_TIMEOUT)
                peers.await_gone(self.context.cluster_spec()["worker"][chief], DONE_TIMEOUT)
                return True
            self._receive("done", own, self.context.num_tasks - 1, DONE_TIMEOUT, "the other {} process(es) to "
                          "end".format(self.context.num_tasks - 1))
            return True
        except JoinError as e:
            print("autodist: {}".format(e), file=sys.stderr, flush=True)
            return False

    def _receive(self, name, owner_task, count, timeout, what):
        """``exchange.receive``, saying every ``peers.REPORT_EVERY`` s what it still waits for."""
        started = time.monotonic()
        while True:
            left = timeout - (time.monotonic() - started)
            try:
                return exchange.receive(self.context.target, self.context.task_index, self.context.job_id, name,
                                        owner_task, count, max(0.1, min(left, peers.REPORT_EVERY)),
                                        "waited for {}".format(what))
            except JoinError as e:
                if not e.timed_out or self.failure() is not None:
                    raise
                if left <= peers.REPORT_EVERY:
                    raise JoinError("{} did not come within {:.0f} s".format(what, timeout)) from None
            self._say("waiting for {} ({:.0f} s of {:.0f})".format(what, time.monotonic() - started, timeout))


def check_versions(chiefs, mine, me, chief):
    """Refuse to train with other autodist or TensorFlow versions than the chief's, naming both."""
    if chiefs != mine:
        raise JoinError("{} runs autodist {} with TensorFlow {}, the chief {} autodist {} with TensorFlow {}: every "
                        "process of a job needs the chief's versions (one container image)".format(
                            me, mine["autodist"], mine["tensorflow"], chief, chiefs["autodist"],
                            chiefs["tensorflow"]))


def _by_rank(spec, place):
    """The spec's nodes in the platform's rank order."""
    from autodist.runtime.join.cluster import nodes_by_rank
    return nodes_by_rank(spec, place)

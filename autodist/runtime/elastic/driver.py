"""The elastic supervisor: attempts on the nodes available now, relaunched when they change.

    autodist run -r spec.yml --host-discovery-script ./hosts.sh --min-nodes 1 --max-nodes 3 train.py ...
    AutoDist(spec, builder, host_discovery_script="./hosts.sh", min_nodes=1, max_nodes=3, checkpoint_dir=...)

Like ``--max-restarts`` (``runtime.restart``) the process you start becomes a
supervisor and each attempt is a chief of a new job, here on the nodes
available when it starts::

    choose     the discovery script's hosts (or every node of the spec), less those set aside,
               at most max_nodes; remote ones pass preflight or are set aside
               (``membership``); fewer than min_nodes: exit NODE_FAILED (a scheduler's
               "retry later"), never a wait that cannot end
    attempt    ELASTIC_ENV: its nodes, the previous ones, the change that led to it
    watch      every interval s: the script again (bounded; a failure is reported and changes
               nothing); a host that appeared (and passes preflight) or disappeared, and stayed so
               for ``settle`` s (a host the script lists only now and then changes nothing) ->
               DIR/request.json: the attempt saves at its next step and exits RESIZED
    RESIZED    not a failure, when the attempt wrote DIR/outcome.json (the job stopped for the
               change; a script's own exit status 79 ends the job with it): a node that left after
               a preemption notice is set aside, then the next attempt on the new set at once
    NODE_FAILED  a failure: counted against max_restarts, the failed host set aside, choose
               again after restart_backoff
    otherwise  the job's status is the supervisor's

Ctrl-C and SIGTERM go to the running attempt, which stops its job
(``docs/running.md``); Ctrl-C between two attempts ends with 130.
"""
import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Optional

from autodist.runtime.elastic.discovery import Discovery
from autodist.runtime.elastic.membership import Membership, nodes_spec, replica_count, unfit_hosts
from autodist.runtime.elastic.protocol import ELASTIC_ENV, OUTCOME, REQUEST, RESIZED, read_json, write_json
from autodist.runtime.notices import notice
from autodist.runtime.recovery.restart import (ATTEMPT_ENV, EXIT_INTERRUPTED, EXIT_RESTARTS_EXHAUSTED, NODE_FAILED, Attempt)

__all__ = ["ElasticSettings", "supervise_elastic", "DEFAULT_SETTLE"]

_FAILED_HOST = re.compile(r"worker on (\S+) ")


#: s a host must be listed (or missing) by every run of the discovery script before the job re-plans
DEFAULT_SETTLE = 10.0


@dataclasses.dataclass
class ElasticSettings:
    """The options of an elastic job (``autodist run --host-discovery-script ...``, ``AutoDist(...)``)."""

    discovery_script: Optional[str] = None   # None: every node of the spec is available
    min_nodes: int = 1
    max_nodes: Optional[int] = None          # None: the spec's node count (no limit with a node_template)
    interval: float = 5.0                    # s between two runs of the discovery script
    host_backoff: float = 60.0               # s a failing host is first set aside
    preemption_signal: Optional[str] = "SIGTERM"   # None: members die on it, as without elasticity
    preemption_grace: float = 30.0
    max_restarts: int = 0                    # node failures survived (membership changes are not failures)
    restart_backoff: float = 2.0
    keep_per_replica_batch: bool = False
    settle: float = DEFAULT_SETTLE           # s a change must hold before the job re-plans (0: at once)


class _Supervisor:
    def __init__(self, argv, spec, settings, sink):
        self.argv, self.spec, self.settings = list(argv), spec, settings
        self._say = lambda text: notice(sink, text)
        limit = settings.max_nodes if settings.max_nodes or spec.node_template else len(spec.node_specs)
        self.members = Membership(spec, settings.min_nodes, limit, settings.host_backoff, self._say)
        self.discovery = Discovery(settings.discovery_script) if settings.discovery_script else None
        self._found = None        # the hosts the script found last ({address: slots})
        self._problem = ""        # why its last run failed ("": it did not)
        self._changes = 0
        self._first_replicas = None
        self._since = {}          # address -> ("joins" / "leaves", time.monotonic() it started to)

    # -- which nodes -------------------------------------------------------------------
    def _discover(self):
        """The hosts found now ({address: slots}; None: every candidate); the last ones when the script fails."""
        if self.discovery is None:
            return None
        found = self.discovery.find()
        if found.hosts is None and found.problem != self._problem:   # said once per problem, not at every run
            self._say("elastic: the discovery script failed ({}); the hosts found before stay: {}".format(
                found.problem, ", ".join(sorted(self._found or {})) or "none yet"))
        elif found.hosts is not None:
            if self._problem:
                self._say("elastic: the discovery script works again")
            self._found = found.hosts
        self._problem = found.problem
        return self._found if self._found is not None else {self.spec.chief: None}

    def _fit(self, nodes, running=()):
        """``nodes`` less the new remote ones that fail preflight (those are set aside)."""
        for address in nodes:
            if address not in running and self.members.retried(address):
                self._say("elastic: trying {} again (its back-off is over)".format(address))
        unfit = unfit_hosts(self.spec, [a for a in nodes if a not in running])
        for address, problem in sorted(unfit.items()):
            self.members.set_aside(address, "preflight: {}".format(problem))
        return [a for a in nodes if a not in unfit]

    def _choose(self, planned=None):
        """The next attempt's nodes and slots: ``planned`` (a settled change), else what is found now."""
        found = self._found if planned else self._discover()
        nodes = planned or self._fit(self.members.wanted(found))
        return nodes, {a: s for a, s in (found or {}).items() if a in nodes and s}

    # -- one attempt --------------------------------------------------------------------
    def _settings_for(self, nodes, slots, previous, change, control):
        spec = nodes_spec(self.spec, nodes, slots)
        if self._first_replicas is None:
            self._first_replicas = replica_count(spec)
        s = self.settings
        return {"nodes": nodes, "slots": slots, "previous": previous[0] if previous else None,
                "previous_slots": previous[1] if previous else None, "control": control, "change": change,
                "next_change": self._changes + 1,
                "signal": s.preemption_signal, "grace": s.preemption_grace,
                "first_replicas": self._first_replicas if s.keep_per_replica_batch else None}

    def _proposal(self, nodes):
        """``(what changed, the new nodes)`` once a change of ``nodes`` has held for ``settle`` s, else None."""
        wanted, now = self.members.wanted(self._discover()), time.monotonic()
        seen = {a: "joins" for a in wanted if a not in nodes}
        seen.update({a: "leaves" for a in nodes if a not in wanted})
        self._since = {a: (kind, self._since[a][1] if self._since.get(a, ("",))[0] == kind else now)
                       for a, kind in seen.items()}   # a host that flips back starts again
        settled = [a for a, (_, since) in self._since.items() if now - since >= self.settings.settle]
        leaving = [a for a in nodes if a in settled and self._since[a][0] == "leaves"]
        room = None if self.members.max_nodes is None else max(0, self.members.max_nodes - len(nodes) + len(leaving))
        joining = [a for a in wanted if a in settled and self._since[a][0] == "joins"][:room]
        joining = self._fit(joining, running=()) if joining else []
        if not joining and not leaving:
            return None
        for address in joining + leaving:
            self._since.pop(address, None)
        parts = ["{} joins".format(a) for a in joining] + ["{} leaves: no longer {}".format(
            a, "listed by the discovery script" if self.discovery else "available") for a in leaving]
        return "; ".join(parts), [a for a in nodes if a not in leaving] + joining

    def _run(self, number, env, nodes, control):
        """``(status, error line, the change requested)`` of one attempt, watching for changes meanwhile."""
        attempt = Attempt(self.argv, dict(os.environ, **env))
        main = threading.current_thread() is threading.main_thread()
        previous = {s: signal.signal(s, attempt.forward) for s in (signal.SIGINT, signal.SIGTERM)} if main else {}
        requested = None
        try:
            while attempt.proc.poll() is None:
                try:
                    attempt.proc.wait(self.settings.interval)
                    break
                except subprocess.TimeoutExpired:   # time to look at the hosts again
                    pass
                if requested is None:
                    proposal = self._proposal(nodes)
                    if proposal is not None:
                        self._changes += 1
                        what = proposal[0]
                        requested = {"change": self._changes, "what": what, "at": time.time(), "nodes": proposal[1]}
                        write_json(control, REQUEST, requested)
                        self._say("membership change {}: {}; the job saves a checkpoint at its next step and "
                                  "continues on the new set of nodes".format(self._changes, what))
            return attempt.wait(), attempt.error, requested
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def run(self, control):
        failures, previous, change, number, planned = [], None, None, 0, None
        while True:
            nodes, slots = self._choose(planned)
            planned = None
            if len(nodes) < self.settings.min_nodes:
                self._say("elastic: {} node(s) available ({}), fewer than min_nodes {}; the job stops here and can "
                          "be run again later (exit status {})".format(len(nodes), ", ".join(nodes),
                                                                      self.settings.min_nodes, NODE_FAILED))
                return NODE_FAILED
            number += 1
            for name in (REQUEST, OUTCOME):
                _remove(os.path.join(control, name))
            self._say("elastic: attempt {} on {} node(s): {}".format(number, len(nodes), ", ".join(nodes)))
            env = {ELASTIC_ENV: json.dumps(self._settings_for(nodes, slots, previous, change, control)),
                   ATTEMPT_ENV: str(number)}
            started = time.monotonic()
            code, error, requested = self._run(number, env, nodes, control)
            previous, change = (nodes, slots), None
            outcome = read_json(control, OUTCOME)
            if code == RESIZED and outcome is not None:   # the job stopped for a change it saw or was asked
                change = self._after_resize(requested, outcome)
                left = outcome.get("leaving", ())
                planned = [a for a in requested["nodes"] if a not in left] if requested else None
                continue
            if code == RESIZED:
                self._say("elastic: attempt {} exited with status {} but made no membership change: it is the "
                          "script's own status, and the job ends with it".format(number, code))
            if code != NODE_FAILED:
                return code
            failures.append("attempt {} ({:.0f} s): {}".format(number, time.monotonic() - started,
                                                              (error or "a node failed").splitlines()[0]))
            failed = _FAILED_HOST.search(error or "")
            if failed and failed.group(1) in nodes and failed.group(1) != self.spec.chief:
                self.members.set_aside(failed.group(1), (error or "").splitlines()[0])
            if len(failures) > self.settings.max_restarts:
                self._say("the job failed {} time(s), no restart left (max_restarts {}):\n{}".format(
                    len(failures), self.settings.max_restarts, "\n".join("  " + f for f in failures)))
                return EXIT_RESTARTS_EXHAUSTED
            self._say("restart {} of {} in {:g} s: {}".format(len(failures), self.settings.max_restarts,
                                                             self.settings.restart_backoff, failures[-1]))
            time.sleep(self.settings.restart_backoff)

    def _after_resize(self, requested, outcome):
        """The change the next attempt reports on; nodes that left after a notice are set aside."""
        for address in outcome.get("leaving", ()):
            self.members.set_aside(address, "a preemption notice")
        if requested is None:   # the attempt saw it (a preemption notice) and numbered it
            self._changes += 1
        source = outcome if outcome.get("what") else (requested or {})
        return {"number": source.get("change", self._changes), "what": source.get("what", "a node left"),
                "at": source.get("at", time.time()), "step": outcome.get("step")}


def _remove(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def supervise_elastic(argv, spec, settings, sink=None):
    """Run ``argv`` (a chief's command) as attempts of an elastic job (module docstring); the final status."""
    control = tempfile.mkdtemp(prefix="autodist-elastic-")
    try:
        return _Supervisor(argv, spec, settings, sink).run(control)
    except KeyboardInterrupt:
        print("autodist: interrupted between two attempts (no job was running); no restart", file=sys.stderr,
              flush=True)
        return EXIT_INTERRUPTED
    finally:
        shutil.rmtree(control, ignore_errors=True)

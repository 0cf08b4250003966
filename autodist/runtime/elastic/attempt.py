"""The chief of one attempt of an elastic job: its nodes, and stopping at a step boundary for a membership change.

The supervisor (``driver``) starts each attempt with its settings in
``ELASTIC_ENV``; the attempt's ``Job`` runs on those nodes and, through this
object, watches for a reason to change them::

    DIR/request.json appears (the supervisor: hosts joined or left)      \\
    a member's report says "leaving" (it got a preemption notice)        / -> pending
    after the chief's next session call, at an update boundary:
        [autodist] membership change 1: 127.0.0.2 leaves after a preemption notice (SIGTERM);
                   saving a checkpoint at global step 12 and stopping the job
        the script's checkpoints save now (``Job.before_term``: SessionCheckpoints / ResumeHook)
        DIR/outcome.json, the job stopped (its directories first: a member's handler then knows
        the stop is not a notice), and ``SystemExit(RESIZED)`` out of the session call

The other nodes are waiting in the next step for the chief then, which
never takes it: the checkpoint holds every step all nodes finished. After a
change, the next attempt says how long it took to train again::

    [autodist] membership change 1, 127.0.0.3 joins: the first step of the new plan ran 9.8 s after the change;
               steps lost: 0

An elastic job needs checkpoints (``AutoDist(checkpoint_dir=)``,
``MonitoredTrainingSession(checkpoint_dir=)`` under ``autodist run``): a
session without them is refused.
"""
import threading
import time

from autodist.errors import CheckpointError
from autodist.runtime.elastic.membership import nodes_spec, replica_count
from autodist.runtime.elastic.preemption import preemption_setting, signal_number
from autodist.runtime.elastic.protocol import (BATCH_SCALE_ENV, OUTCOME, PREEMPTION_ENV, REQUEST, RESIZED,
                                               attempt_settings, read_json, write_json)
from autodist.runtime.notices import notice

__all__ = ["ElasticAttempt", "WATCH_INTERVAL"]

WATCH_INTERVAL = 0.2


class ElasticAttempt:
    """One attempt's elastic side (module docstring); ``settings`` is ``protocol.attempt_settings``."""

    def __init__(self, settings, job, say):
        self._settings = settings
        self._job = job
        self._say = say
        self._pending = None     # (change number, what, leaving addresses, time.time() of the change)
        self._stop = threading.Event()
        self._watcher = None
        self._timed = settings.get("change") is None
        self.scale = 1.0   # replicas now / at the first attempt, when the job keeps the per-replica batch

    @classmethod
    def of_chief(cls, environ, job):
        """The elastic side of a new chief that an elastic supervisor started (``ELASTIC_ENV``), or None."""
        settings = attempt_settings(environ)
        return cls(settings, job, lambda text: notice(None, text)) if settings is not None else None

    def specs(self, full_spec):
        """``(this attempt's spec, the previous attempt's)``: the same object when the nodes did not change."""
        s = self._settings
        now = nodes_spec(full_spec, s["nodes"], s.get("slots"))
        self.scale = replica_count(now) / s["first_replicas"] if s.get("first_replicas") else 1.0
        if not s.get("previous") or (s["previous"], s.get("previous_slots")) == (s["nodes"], s.get("slots")):
            return now, now
        return now, nodes_spec(full_spec, s["previous"], s.get("previous_slots"))

    @property
    def worker_env(self):
        """What a member needs: the preemption signal it answers and its grace, the batch scale."""
        env = {BATCH_SCALE_ENV: repr(self.scale)} if self.scale != 1.0 else {}
        name = self._settings.get("signal")
        if name:
            env[PREEMPTION_ENV] = preemption_setting(signal_number(name), self._settings.get("grace", 30.0))
        return env

    def attach(self, session, first):
        """Every session of the attempt: stop after a call when a change is pending (``Job.on_session``)."""
        if first:
            if not self._job.before_term:
                raise CheckpointError(
                    "an elastic job resumes from a checkpoint after each membership change, and this script keeps "
                    "none: give AutoDist(checkpoint_dir=...) (under autodist run: "
                    "MonitoredTrainingSession(checkpoint_dir=...))")
            self._watcher = threading.Thread(target=self._watch, name="autodist-elastic", daemon=True)
            self._watcher.start()
        session.after_run.append(self._after_run)

    def _watch(self):
        control = self._settings["control"]
        while self._pending is None and not self._stop.wait(WATCH_INTERVAL):
            request = read_json(control, REQUEST)
            if request is not None:
                self._pending = (request["change"], request["what"], [], request["at"])
                return
            leaving = {a: r.get("leaving") for a, r in self._job.member_reports().items() if r.get("leaving")}
            if leaving:
                what = "; ".join("{} leaves after a preemption notice ({})".format(a, s)
                                 for a, s in sorted(leaving.items()))
                self._pending = (self._settings.get("next_change", 1), what, sorted(leaving), time.time())
                return

    def _after_run(self, session):
        if not self._timed and self._job.steps_trained:
            self._timed = True
            self._say_resumed(session)
        if self._pending is not None and getattr(session, "at_update_boundary", True):
            self._resize(session)

    def _say_resumed(self, session):
        change = self._settings["change"]
        step = _global_step(session)
        lost = "" if step is None or change.get("step") is None else "; steps lost: {}".format(
            max(0, change["step"] - (step - 1)))
        self._say("membership change {}, {}: the first step of the new plan ran {:.1f} s after the change{}".format(
            change["number"], change["what"], time.time() - change["at"], lost))

    def _resize(self, session):
        number, what, leaving, at = self._pending
        self._pending = None
        self._stop.set()
        step = _global_step(session)
        self._say("membership change {}: {}; saving a checkpoint{} and stopping the job".format(
            number, what, "" if step is None else " at global step {}".format(step)))
        for save in self._job.before_term:
            save()
        write_json(self._settings["control"], OUTCOME, {"change": number, "what": what, "leaving": leaving, "at": at,
                                                        "step": step})
        self._job.finish(abort=True, reason="membership change {}".format(number))
        raise SystemExit(RESIZED)


def _global_step(session):
    """The global step's value now, read without a session call of the user's (None: the graph has none)."""
    import tensorflow as tf
    from autodist.checkpoint.binding import read_state
    from autodist.checkpoint.layout import specs_of, variables_of
    step = tf.compat.v1.train.get_global_step(session.graph)
    if step is None:
        return None
    return int(next(iter(read_state(session, specs_of(variables_of([step], session.graph))).values())))

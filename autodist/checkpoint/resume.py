"""Resume training where the newest complete checkpoint left it: restore-or-initialize, periodic saves.

Two faces over one ``Resumer`` (a checkpoint directory, the chief's saves,
every node's restore):

    hook = ResumeHook(checkpoint_dir, restore_from, is_chief, save_steps=5)   # autodist run, in the graph
    MonitoredSession(..., hooks=[hook, ...])
        after_create_session   every node: restore ``restore_from`` (the chief's
                               newest checkpoint, or None: keep the initial values)
        after_run              the chief: save every ``save_steps`` global steps / ``save_secs`` s
        end                    the chief: save the final state
        save_now               the chief, on SIGTERM: save now, bounded

    AutoDist(spec, checkpoint_dir=DIR, save_every=K)                     # the API (``SessionCheckpoints``)
        create_distributed_session   every node: restore-or-initialize, as above
        sess.run (every K-th call)   the chief: save at the current global step

What ``MonitoredTrainingSession(checkpoint_dir=...)`` does for a plain
session, for a distributed one: checkpoints are ``autodist.checkpoint.Saver``'s
(single-device layout, written by the chief only), so a job restarted on
another number of nodes or under another strategy restores them too.

Restoring is collective (the chief reads the file, the values reach every
replica by broadcast), so every node must agree whether to restore before
the session exists: the chief decides from its own directory
(``newest_checkpoint``) and tells the other nodes when it launches them
(``RESTORE_ENV``).

With gradient accumulation (``AutoDist(accumulation_steps=k)``) a periodic
save that falls inside an accumulation waits for its update: a checkpoint
holds applied updates only (the accumulators are not saved; a save on SIGTERM
or at the end does not wait, and the partial sums of an unfinished update are
lost with it).

Saves are atomic where it matters: TensorFlow writes a checkpoint's files
under a new prefix (``model.ckpt-<step>``), then replaces the ``checkpoint``
state file (write to a temporary, rename). A process killed while saving
leaves the state naming the previous complete checkpoint, which is what the
next attempt restores (``tests/checkpoint/test_resume_api.py`` kills a
saving process). A save at the step saved last is skipped, so a prefix is
never written twice.
"""
import os
import re
import threading
import time

import tensorflow as tf

from autodist.checkpoint.binding import read_state
from autodist.checkpoint.layout import specs_of, variables_of
from autodist.checkpoint.saver import Saver
from autodist.errors import CheckpointError

__all__ = ["ResumeHook", "SessionCheckpoints", "Resumer", "newest_checkpoint", "step_of", "last_step_of",
           "RESTORE_ENV", "CHECKPOINT_BASENAME"]

RESTORE_ENV = "AUTODIST_RESTORE"   # "1": the chief restores a checkpoint at session creation, join it
CHECKPOINT_BASENAME = "model.ckpt"
_STEP = re.compile(r"-(\d+)\Z")


def newest_checkpoint(checkpoint_dir):
    """The newest complete checkpoint's prefix in ``checkpoint_dir`` (TensorFlow's state file), or None."""
    if not checkpoint_dir or not os.path.isdir(checkpoint_dir):
        return None
    return tf.train.latest_checkpoint(checkpoint_dir)


def step_of(path):
    """The global step in a checkpoint prefix such as ``model.ckpt-40``, or None."""
    match = _STEP.search(path or "")
    return int(match.group(1)) if match else None


class Resumer:
    """One checkpoint directory of a distributed session: every node's restore, the chief's saves.

    ``restore_from``: the checkpoint the chief restores, ``True`` on the other
    nodes when the chief restores one (they take part in the broadcast), or
    None. ``say(text)`` prints a line for the user; ``heading`` starts the
    line that says where training resumes (``"attempt 2: "``). ``count()``:
    the step a checkpoint is named by (None: the graph's global step).
    """

    def __init__(self, checkpoint_dir, restore_from, is_chief, say, heading="", count=None):
        self.dir = checkpoint_dir
        self.is_chief = is_chief
        self._restore_from = restore_from
        self.say = say
        self.heading = heading   # "attempt 2: " under a supervisor
        self._saver = None
        self._step = None       # {key: spec} of the global step
        self._count = count
        self.session = None     # the DistributedSession saved from (None until ``start``: nothing to save)
        self.last = (None, time.monotonic())    # (step, time) of the last save

    @property
    def restore_from(self):
        return self._restore_from

    @restore_from.setter
    def restore_from(self, value):   # a platform-started job's process learns it with the chief's plan
        self._restore_from = value

    def start(self, session, global_step=None):
        """Restore-or-initialize ``session`` (every node, at the same point), then remember it for saves."""
        self.session = session
        if self._count is None:
            self._step = specs_of(variables_of([global_step], session.graph))
        if self._saver is None:
            with session.graph.as_default():
                self._saver = Saver(max_to_keep=3)
        if self._restore_from:
            path = self._restore_from if self.is_chief else None
            self._saver.restore(session, path)
            if self.is_chief:
                self.say("{}resuming from checkpoint {} (global step {})".format(self.heading, path, step_of(path)))
        elif self.is_chief and self.heading:
            self.say("{}no checkpoint in {} yet; training starts from the initial values".format(
                self.heading, self.dir))
        self.last = (self.global_step() if self._restore_from else None, time.monotonic())

    def global_step(self):
        """The global step's value now (read outside the user's calls: no hooks, no views), or ``count()``."""
        if self._count is not None:
            return self._count()
        return int(next(iter(read_state(self.session, self._step).values())))

    def save(self, step=None):
        """Write a checkpoint at ``step`` (None: the global step now); its path (the newest one's when that
        step is saved already)."""
        if step is None:
            step = self.global_step()
        if step == self.last[0]:
            return newest_checkpoint(self.dir)
        os.makedirs(self.dir, exist_ok=True)
        path = self._saver.save(self.session, os.path.join(self.dir, CHECKPOINT_BASENAME), global_step=step,
                                write_meta_graph=False)
        self.last = (step, time.monotonic())
        return path

    def save_now(self, timeout=30.0):
        """Save the current state (the chief; on SIGTERM), waiting at most ``timeout`` s; True when saved."""
        if not self.is_chief or self.session is None:
            return False
        done = []
        worker = threading.Thread(target=lambda: done.append(self.save()), daemon=True,
                                  name="autodist-last-checkpoint")
        worker.start()
        worker.join(timeout)
        if not done:
            self.say("no checkpoint saved: the save did not finish within {:.0f} s".format(timeout))
            return False
        self.say("saved checkpoint {} (global step {}) before stopping".format(done[0], self.last[0]))
        return True


class ResumeHook(tf.compat.v1.train.SessionRunHook):
    """``MonitoredTrainingSession(checkpoint_dir=...)`` under ``autodist run`` (see the module docstring).

    ``distributed(session)`` gives the DistributedSession behind the session
    the hooks see; the other arguments are ``Resumer``'s and the save interval
    (``heading``: ``"attempt 2: "`` under a supervisor, whose restart line
    leaves it to the attempt to say where training resumes).
    """

    def __init__(self, checkpoint_dir, restore_from, is_chief, distributed, say, save_steps=None, save_secs=None,
                 heading="", last_step=None):
        if save_steps is None and save_secs is None:
            save_secs = 600.0   # MonitoredTrainingSession's default
        self._resumer = Resumer(checkpoint_dir, restore_from, is_chief, say, heading)
        self._distributed = distributed
        self._save_steps, self._save_secs = save_steps, save_secs
        self._global_step = tf.compat.v1.train.get_or_create_global_step()
        self._last_step = last_step   # the script's StopAtStepHook(last_step=...), if any (``last_step_of``)

    def save_now(self, timeout=30.0):
        return self._resumer.save_now(timeout)

    def adopt(self, worker_env):
        """A process of a platform-started job: the chief's decision whether to restore (with its plan)."""
        if not self._resumer.is_chief:
            self._resumer.restore_from = worker_env.get(RESTORE_ENV) == "1"

    def after_create_session(self, session, coord):
        self._resumer.start(self._distributed(session), self._global_step)
        if self._resumer.restore_from and self._last_step is not None:
            self._stop_if_done(coord)

    def _stop_if_done(self, coord):
        """A checkpoint at the script's last step: stop before any step (StopAtStepHook would run one more: it
        looks after a step), on every node alike (they restored the same step)."""
        step = self._resumer.global_step()
        if step >= self._last_step:
            if self._resumer.is_chief:
                self._resumer.say("{}the checkpoint is at global step {}, the script's last step is {}: nothing is "
                                  "left to train".format(self._resumer.heading, step, self._last_step))
            coord.request_stop()

    def before_run(self, run_context):
        return tf.compat.v1.train.SessionRunArgs(self._global_step)

    def after_run(self, run_context, run_values):
        step = int(run_values.results)
        saved_step, saved_at = self._resumer.last
        due = ((self._save_steps is not None and step - (saved_step or 0) >= self._save_steps) or
               (self._save_secs is not None and time.monotonic() - saved_at >= self._save_secs))
        if self._resumer.is_chief and due and _at_update_boundary(self._distributed(run_context.session)):
            self._resumer.save(step)

    def end(self, session):
        if self._resumer.is_chief:
            self._resumer.save()


def last_step_of(hooks):
    """The smallest ``last_step`` of the ``StopAtStepHook`` among ``hooks`` (None: none stops at a global step).

    TensorFlow keeps it in the hook's ``_last_step`` (``num_steps`` counts from each session's first step
    instead, and sets it only then): there is no public accessor."""
    steps = [h._last_step for h in hooks if isinstance(h, tf.compat.v1.train.StopAtStepHook)
             and getattr(h, "_last_step", None) is not None]
    return min(steps) if steps else None


class SessionCheckpoints:
    """``AutoDist(checkpoint_dir=, save_every=)``: restore-or-initialize and periodic saves for the API.

    The chief decides at construction whether the job resumes
    (``worker_env``, given to the other nodes when they are launched); a node
    launched by the chief reads the decision from ``environ``. ``attach`` is
    called with every session the job opens: the first restores (every node),
    each later one (``ad.function`` reopening for a grown graph, which moves
    the values itself) only takes over the saves. The chief saves after every
    ``save_every``-th ``run`` call of the session, at the global step the
    graph counts (``tf.compat.v1.train.get_or_create_global_step()``, given to
    ``minimize``), so a resumed script reads where to continue from it.
    """

    def __init__(self, checkpoint_dir, save_every, is_chief, environ, say, attempt=None):
        if save_every is not None and (not isinstance(save_every, int) or save_every < 1):
            raise CheckpointError("save_every must be a positive number of session calls, got {!r}".format(
                save_every))
        self.worker_env = {}
        if is_chief:
            restore_from = newest_checkpoint(checkpoint_dir)
            self.worker_env[RESTORE_ENV] = "1" if restore_from else "0"
        else:
            restore_from = (environ or {}).get(RESTORE_ENV) == "1"
        self._resumer = Resumer(checkpoint_dir, restore_from, is_chief, say,
                                "attempt {}: ".format(attempt) if attempt else "")
        self._every = save_every
        self._calls = 0
        self._due = False   # a save that waits for the end of an accumulation (``_at_update_boundary``)

    def adopt(self, worker_env):
        """A process of a platform-started job: the chief's decision whether to restore, handed over with its
        plan (``runtime.join``) instead of the environment it launches the others with."""
        if not self._resumer.is_chief:
            self._resumer.restore_from = worker_env.get(RESTORE_ENV) == "1"

    def attach(self, session, first):
        """Restore-or-initialize ``session`` (``first``) or move the saves to it; save after its run calls."""
        if first:
            self._resumer.start(session, _global_step_of(session.graph, self._resumer.dir))
        else:
            self._resumer.session = session
        if self._every is not None:
            session.after_run.append(self._after_run)

    def _after_run(self, session):
        if session is not self._resumer.session:
            return
        self._calls += 1
        self._due = self._due or self._calls % self._every == 0
        if self._resumer.is_chief and self._due and _at_update_boundary(session):
            self._resumer.save()
            self._due = False

    def save_now(self, timeout=30.0):
        """The chief, on SIGTERM: a last checkpoint, bounded (``Job.before_term``)."""
        return self._resumer.save_now(timeout)


def _at_update_boundary(session):
    """Whether ``session`` (a DistributedSession) is between updates: a periodic save waits while gradients
    are being accumulated, so that a checkpoint holds the state of applied updates only."""
    return getattr(session, "at_update_boundary", True)


def _global_step_of(graph, checkpoint_dir):
    step = tf.compat.v1.train.get_global_step(graph)
    if step is None:
        raise CheckpointError(
            "checkpoint_dir={!r} names checkpoints by the global step, and the graph has none: create it with "
            "tf.compat.v1.train.get_or_create_global_step() and pass it to minimize(..., global_step=...) (or "
            "apply_gradients) inside the scope, then resume your loop from its value".format(checkpoint_dir))
    return step

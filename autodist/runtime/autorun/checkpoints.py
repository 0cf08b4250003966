"""``autodist run --checkpoint-dir DIR``: the whole job saves and resumes, for any script.

    autodist run -r spec.yml --checkpoint-dir ckpt [--checkpoint-steps N] [--checkpoint-secs T] train.py ...

What Keras' ``BackupAndRestore`` does for one ``fit``, for the job and any
script the command runs (a tf.compat.v1 session loop, an unmodified Keras
``fit``), counted in the job's training steps (session calls that run a
training op, on every node the same):

    save          the chief alone, after a training step once N steps or T seconds (default 60 s) have
                  passed since the last save, at an update boundary; on SIGTERM; named DIR/model.ckpt-<steps>
    resume        the chief finds the newest checkpoint before it launches the job and tells the other nodes
                  (their environment, or the platform's handoff); every node restores it as its session opens
    fast-forward  the script runs from its start again and its first <steps> training steps are not run:
                  a session call that trains runs its other fetches on the restored weights (and draws the
                  tf.data batches the step would have read); Keras ``fit`` passes over the batches (they are
                  drawn, so that every later shuffle is the same) without calling the step or its callbacks
    end           when the script ends with status 0 and the job succeeded, the chief removes the
                  checkpoints: the next run of the command starts afresh, as after BackupAndRestore

So a run killed at any point and started again with the same command ends
with the weights of a run that was never interrupted (the script's data must
be the same at every run, as it must be for that run itself).
"""
import glob
import os
import re
import time

import tensorflow as tf

from autodist.checkpoint.resume import CHECKPOINT_BASENAME, RESTORE_ENV, Resumer, newest_checkpoint, step_of
from autodist.capture.queries import ancestors
from autodist.errors import CheckpointError

__all__ = ["ScriptCheckpoints", "skipped_call", "RESUME_STEP_ENV"]

RESUME_STEP_ENV = "AUTODIST_RESUME_STEP"   # the training steps the chief's checkpoint holds: every node skips them
_SAVED = re.compile(re.escape(CHECKPOINT_BASENAME) + r"-\d+\.(index|meta|data-\d+-of-\d+)\Z")   # a save's files
_ITERATOR_READS = frozenset(["IteratorGetNext", "IteratorGetNextSync", "IteratorGetNextAsOptional"])


class ScriptCheckpoints:
    """The checkpoints of one ``autodist run`` (module docstring); ``job``: this process's ``runtime.job.Job``;
    ``steps`` / ``secs``: save every that many training steps / seconds (None: not by that measure)."""

    def __init__(self, directory, steps, secs, job, environ, say):
        self.dir = os.path.abspath(directory)
        self._every = (steps, secs)
        self._job, self._say = job, say
        if job.is_chief:
            restore_from = newest_checkpoint(self.dir)
            self.resume_at = (step_of(restore_from) or 0) if restore_from else 0
            job.worker_env.update({RESTORE_ENV: "1" if restore_from else "0", RESUME_STEP_ENV: str(self.resume_at)})
        else:
            restore_from = environ.get(RESTORE_ENV) == "1"
            self.resume_at = int(environ.get(RESUME_STEP_ENV) or 0)
        self._to_skip = self.resume_at
        self._base = None   # the job's training steps when its first session opened
        heading = "attempt {}: ".format(job.attempt) if job.attempt else ""
        self._resumer = Resumer(self.dir, restore_from, job.is_chief, say, heading, count=self.steps)
        job.on_session.append(self.attach)
        job.on_handoff.append(self.adopt)
        job.before_term.append(self.save_now)
        job.checkpoints = self

    def adopt(self, worker_env):
        """A process of a platform-started job: the chief's decision, handed over with its plan."""
        if not self._job.is_chief:
            self._resumer.restore_from = worker_env.get(RESTORE_ENV) == "1"
            self.resume_at = self._to_skip = int(worker_env.get(RESUME_STEP_ENV) or 0)

    def steps(self):
        """The job's training steps so far, the ones the checkpoint held included."""
        base = self._base if self._base is not None else self._job.steps_trained
        return self.resume_at + self._job.steps_trained - base

    # -- the fast-forward ----------------------------------------------------------------
    @property
    def skipping(self):
        """True while the script is still before the step the checkpoint holds."""
        return self._to_skip > 0

    def skip(self):
        """Whether the training step about to run is one the checkpoint holds (counted as passed if so)."""
        if self._to_skip <= 0:
            return False
        self._to_skip -= 1
        if self._to_skip == 0 and self._job.is_chief:
            self._say("the script is at training step {} again (the checkpoint's): training goes on from "
                      "there".format(self.resume_at))
        return True

    # -- sessions and saves --------------------------------------------------------------
    def attach(self, session, first):
        """Every session the job opens: the first restores (every node), each saves after its training steps."""
        if first:
            self._base = self._job.steps_trained
            self._resumer.start(session)
        else:
            self._resumer.session = session
        session.after_run.append(self._after_run)

    def _after_run(self, session):
        if session is not self._resumer.session or not self._job.is_chief:
            return
        steps = self.steps()
        saved, at = self._resumer.last
        every_steps, every_secs = self._every
        if steps == (saved if saved is not None else 0):
            return   # no training step since the last save (or the start)
        due = (every_steps is not None and steps - (saved or 0) >= every_steps) or \
            (every_secs is not None and time.monotonic() - at >= every_secs)
        if due and getattr(session, "at_update_boundary", True):
            self._resumer.save(steps)

    def save_now(self, timeout=30.0):
        """The chief, on SIGTERM (``Job.before_term``): a last checkpoint, bounded."""
        return self._resumer.save_now(timeout)

    def finish(self):
        """The chief, after the job succeeded: remove the checkpoints of this directory (a new run starts afresh)."""
        if not self._job.is_chief:
            return
        ours = [path for path in glob.glob(os.path.join(glob.escape(self.dir), CHECKPOINT_BASENAME + "-*"))
                if _SAVED.match(os.path.basename(path))]
        for path in ours + [os.path.join(self.dir, "checkpoint")]:
            if os.path.exists(path):
                os.unlink(path)
        if ours:
            self._say("the job succeeded: its checkpoints in {} are removed (the next run starts afresh)".format(
                self.dir))
        try:
            os.rmdir(self.dir)
        except OSError:
            pass   # not empty (other files), or gone


def skipped_call(distributed, fetches, feed_dict, run):
    """A training call the checkpoint holds, not trained again: ``run(fetches, feed_dict)`` of its other fetches.

    Training ops give None, as when they run; a tensor that is computed
    after the training op cannot be given without training and is refused.
    The batches the step would read from ``tf.data`` iterators are drawn, so
    that the steps after the checkpoint read what they read before.
    """
    from autodist.runtime.session.fetch_mapping import flatten_fetches
    leaves, pack = flatten_fetches(fetches)
    kept, reads = [], set()
    for index, leaf in enumerate(leaves):
        if not distributed.trains(leaf):
            kept.append(index)
            continue
        element = distributed.element(leaf)
        if not isinstance(element, tf.Operation):
            raise CheckpointError(
                "the script fetches {!r} in a training step that the checkpoint already holds, and it is computed "
                "after the training op: autodist run --checkpoint-dir passes over those steps without training "
                "and cannot give its value; fetch it in a call of its own".format(element.name))
        reads.update(op for op in ancestors([element]) if op.type in _ITERATOR_READS)
    wanted = [leaves[i] for i in kept] + sorted(reads, key=lambda op: op.name)
    values = run(wanted, feed_dict) if wanted else []
    out = [None] * len(leaves)
    for index, value in zip(kept, values):
        out[index] = value
    return pack(out)

"""Resume training where the newest complete checkpoint left it: restore-or-initialize, periodic saves.

    hook = ResumeHook(checkpoint_dir, restore_from, is_chief, save_steps=5)   # in the training graph
    MonitoredSession(..., hooks=[hook, ...])
        after_create_session   every node: restore ``restore_from`` (the chief's
                               newest checkpoint, or None: keep the initial values)
        after_run              the chief: save every ``save_steps`` steps / ``save_secs`` s
        end                    the chief: save the final state
        save_now               the chief, on SIGTERM: save now, bounded

What ``MonitoredTrainingSession(checkpoint_dir=...)`` does for a plain
session, for a distributed one: checkpoints are ``autodist.checkpoint.Saver``'s
(single-device layout, written by the chief only), so a job restarted on
another number of nodes or under another strategy restores them too.

Restoring is collective (the chief reads the file, the values reach every
replica by broadcast), so every node must agree whether to restore before
the session exists: the chief decides from its own directory
(``newest_checkpoint``) and tells the other nodes when it launches them
(``RESTORE_ENV``, see ``autodist.runtime.autorun``).

Saves are atomic where it matters: TensorFlow writes a checkpoint's files,
then replaces the ``checkpoint`` state file (write to a temporary, rename).
A process killed while saving leaves the state naming the previous complete
checkpoint, which is what the next attempt restores.
"""
import os
import re
import threading
import time

import tensorflow as tf

from autodist.checkpoint.saver import Saver

__all__ = ["ResumeHook", "newest_checkpoint", "RESTORE_ENV", "CHECKPOINT_BASENAME"]

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


class ResumeHook(tf.compat.v1.train.SessionRunHook):
    """Restore at session creation, save on the chief (see the module docstring).

    ``restore_from``: the checkpoint the chief restores, ``True`` on the other
    nodes when the chief restores one (they take part in the broadcast), or
    None. ``distributed(session)`` gives the DistributedSession behind the
    session the hooks see; ``say(text)`` prints a line for the user.
    """

    def __init__(self, checkpoint_dir, restore_from, is_chief, distributed, say, save_steps=None, save_secs=None):
        if save_steps is None and save_secs is None:
            save_secs = 600.0   # MonitoredTrainingSession's default
        self._dir = checkpoint_dir
        self._restore_from = restore_from
        self._is_chief = is_chief
        self._distributed = distributed
        self._say = say
        self._save_steps, self._save_secs = save_steps, save_secs
        self._saver = Saver(max_to_keep=3)
        self._global_step = tf.compat.v1.train.get_or_create_global_step()
        self._last = (None, time.monotonic())    # (step, time) of the last save
        self._session = None

    def save_now(self, timeout=30.0):
        """Save the current state (the chief; on SIGTERM), waiting at most ``timeout`` s; True when saved."""
        session = self._session
        if not self._is_chief or session is None:
            return False
        done = []
        worker = threading.Thread(target=lambda: done.append(self._save(session, None)), daemon=True,
                                  name="autodist-last-checkpoint")
        worker.start()
        worker.join(timeout)
        if not done:
            self._say("no checkpoint saved: the save did not finish within {:.0f} s".format(timeout))
            return False
        self._say("saved checkpoint {} (global step {}) before stopping".format(done[0], self._last[0]))
        return True

    def after_create_session(self, session, coord):
        self._session = session
        if self._restore_from:
            path = self._restore_from if self._is_chief else None
            self._saver.restore(self._distributed(session), path)
            if self._is_chief:
                self._say("resuming from checkpoint {} (global step {})".format(path, step_of(path)))
        self._last = (int(session.run(self._global_step)), time.monotonic())

    def before_run(self, run_context):
        return tf.compat.v1.train.SessionRunArgs(self._global_step)

    def after_run(self, run_context, run_values):
        step = int(run_values.results)
        saved_step, saved_at = self._last
        due = ((self._save_steps is not None and step - (saved_step or 0) >= self._save_steps) or
               (self._save_secs is not None and time.monotonic() - saved_at >= self._save_secs))
        if self._is_chief and due:
            self._save(run_context.session, step)

    def end(self, session):
        if self._is_chief:
            step = int(session.run(self._global_step))
            if step != self._last[0]:
                self._save(session, step)

    def _save(self, session, step):
        """Write a checkpoint at ``step`` (None: the global step now); its path."""
        distributed = self._distributed(session)
        if step is None:
            step = int(distributed.run(self._global_step))
        os.makedirs(self._dir, exist_ok=True)
        path = self._saver.save(distributed, os.path.join(self._dir, CHECKPOINT_BASENAME), global_step=step,
                                write_meta_graph=False)
        self._last = (step, time.monotonic())
        return path

"""Messages between a platform-started job's processes, over the job's own TensorFlow servers.

No SSH, no shared file system, no protocol of our own: a message is a string
in a ``FIFOQueue`` that lives on the receiving side's server (``shared_name``
per job and recipient); the sender enqueues into it through its own session,
the recipient dequeues. TensorFlow's gRPC carries it, as it carries a
parameter server's tokens::

    chief (task 0)                                   task k
      enqueue(strategy, spec, versions) ---------->  dequeue, bounded  (queue "<job>/to/k", on task 0)
      dequeue k-1 "done", bounded   <-------------   enqueue "done" at its end (queue "<job>/done", on task 0)

``send`` and ``receive`` run on a session of the caller's own server that
only needs the two servers involved (device filters), under a bound: a
queue op that waits longer raises ``JoinError`` naming whom it waited for.
"""
import tensorflow as tf

from autodist.errors import LaunchError
from autodist.plan.names import host_cpu
from autodist.runner.base import run_bounded

__all__ = ["send", "receive", "queue_of", "run_ops", "announce", "identity_problem", "identity_of", "JoinError"]


class JoinError(LaunchError):
    """A platform-started job could not come together (a process missing, a message that did not come);
    ``timed_out``: nothing came within the bound (the wait may be tried again)."""

    def __init__(self, message, timed_out=False):
        super().__init__(message)
        self.timed_out = timed_out


def queue_of(job_id, name, owner_task):
    """The queue ``name`` of job ``job_id``, on task ``owner_task``'s CPU (build it in a graph's context)."""
    with tf.device(host_cpu(owner_task)):
        return tf.queue.FIFOQueue(1 << 20, [tf.string], shapes=[[]], shared_name="{}/{}".format(job_id, name),
                                  name=name.replace("/", "_"))


def _session(target, graph, tasks):
    if tasks is None:
        return tf.compat.v1.Session(target, graph=graph)
    config = tf.compat.v1.ConfigProto(device_filters=[host_cpu(t).rsplit("/", 1)[0] for t in sorted(set(tasks))])
    return tf.compat.v1.Session(target, graph=graph, config=config)


def run_ops(target, build, timeout, waiting_for, tasks=None):
    """Build ops with ``build()`` in a new graph and run them on ``target`` (a session that only needs the
    servers of ``tasks``, when given), within ``timeout`` s; a ``JoinError`` starting with ``waiting_for``."""
    graph = tf.Graph()
    with graph.as_default():
        fetch = build()
    box = []

    def call():
        try:
            with _session(target, graph, tasks) as session:
                box.append((True, session.run(fetch, options=tf.compat.v1.RunOptions(
                    timeout_in_ms=int(timeout * 1000)))))
        except tf.errors.OpError as e:
            box.append((False, e))
    if not run_bounded(call, timeout + 5.0, name="autodist-join-exchange") or not box:
        raise JoinError("{}: nothing came within {:.0f} s".format(waiting_for, timeout), timed_out=True)
    ok, value = box[0]
    if ok:
        return value
    if isinstance(value, tf.errors.DeadlineExceededError):
        raise JoinError("{}: nothing came within {:.0f} s".format(waiting_for, timeout), timed_out=True)
    lines = [line for line in value.message.splitlines() if line.strip() and "Graph execution error" not in line]
    raise JoinError("{}: {}".format(waiting_for, lines[0].strip() if lines else type(value).__name__))


def identity_of(job_id, task):
    return "{} task {}".format(job_id, task)


def _identity_handle(job_id, task):
    with tf.device(host_cpu(task)):
        return tf.raw_ops.VarHandleOp(dtype=tf.string, shape=[], shared_name="{}/identity".format(job_id),
                                      container="")


def announce(target, job_id, task, timeout):
    """Set this process's identity on its own server (``identity_of``): the others' readiness reads it."""
    def build():
        handle = _identity_handle(job_id, task)
        with tf.device(host_cpu(task)):
            return tf.raw_ops.AssignVariableOp(resource=handle, value=tf.constant(identity_of(job_id, task)))
    run_ops(target, build, timeout, "could not set this process's identity on its own server", tasks=(task,))


def identity_problem(target, own_task, job_id, task, timeout):
    """None when task ``task``'s server holds that task's identity in job ``job_id``, else why not (a phrase)."""
    def build():
        with tf.device(host_cpu(task)):
            return tf.raw_ops.ReadVariableOp(resource=_identity_handle(job_id, task), dtype=tf.string)
    problem = "its TensorFlow server is not this job's process of task {}".format(task)
    try:
        found = run_ops(target, build, timeout, problem, tasks=(own_task, task))
    except JoinError as e:
        if "Could not find variable" in str(e):
            return problem + " (another job's server on the port, or a process that has not announced itself yet)"
        return str(e)
    if found.decode("utf-8", "replace") != identity_of(job_id, task):
        return "{} (it answers as {!r})".format(problem, found.decode("utf-8", "replace"))
    return None


def send(target, own_task, job_id, name, owner_task, messages, timeout):
    """Enqueue ``messages`` (bytes) into queue ``name`` on task ``owner_task``."""
    def build():
        queue = queue_of(job_id, name, owner_task)
        return tf.group(*[queue.enqueue(tf.constant(m)) for m in messages])
    run_ops(target, build, timeout, "could not hand a message to task {} of job {}".format(owner_task, job_id),
            tasks=(own_task, owner_task))


def receive(target, own_task, job_id, name, owner_task, count, timeout, waiting_for):
    """Dequeue ``count`` messages (bytes) from queue ``name`` on task ``owner_task``."""
    def build():
        return queue_of(job_id, name, owner_task).dequeue_many(count)
    return list(run_ops(target, build, timeout, waiting_for, tasks=(own_task, owner_task)))

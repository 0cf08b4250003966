"""The distributed session: the user's graph elements in, this node's replicas underneath.

    feeds    a tensor whose shape has an unknown dimension (the first None) is
             split evenly across this node's replicas along it, replica 0 taking
             the first rows; other feeds go to every replica
    fetches  ops run in every replica (a train op trains every replica); a tensor
             with an unknown dimension is concatenated in replica order along it;
             other tensors come from replica 0; variables give their synchronized
             value; ops kept once (parameter-server variables) are fetched as they are
    composites  an IndexedSlices or a SparseTensor is fetched and fed through its
             component tensors by the rules above, as ``tf.compat.v1.Session`` does
             (``autodist.runtime.session.composites``)

The mapping itself (``FetchMapper``, ``flatten_fetches``) is in
``autodist.runtime.session.fetch_mapping``; this module runs the mapped step, watched
(``WatchedCaller``), and closes the session within a bound (``close_bounded``).

What the session runs is the user's graph as it was when the session was
created: it was captured, planned and transformed at that moment. Ops added
later (an init op made inside ``with Session()``, a saver) do no harm until
they are fetched or fed, which raises ``GraphChangedError``. A remote failure seen by the
coordinator turns the next error of ``run`` into ``RemoteWorkerError``: a step
that fails because a peer vanished (gRPC's "unavailable", a cancelled
collective...) often fails before the coordinator has seen the process exit,
so such errors wait up to ``PEER_ERROR_GRACE`` seconds for that report.
"""
import queue
import sys
import threading
import time
import weakref

import tensorflow as tf
from tensorflow.python.client import session as tf_session

from autodist.capture.datasets import end_of_input, is_end_of_input
from autodist.errors import GraphChangedError, SessionError
from autodist.runtime.session.composites import component_feeds
from autodist.runtime.session.fetch_mapping import FetchMapper, flatten_fetches
from autodist.runtime.session.input_epochs import explained_end_of_input
from autodist.runtime.session.micro_steps import MicroSteps
from autodist.runner.base import run_bounded, wait_until
from autodist.runtime.session.run_plans import RunPlans, map_fetches
from autodist.runtime.session.sync_ops import SyncIndex

__all__ = ["DistributedSession", "FetchMapper", "WatchedCaller", "calls_in_flight", "await_failure", "flatten_fetches", "close_bounded",
           "PEER_ERROR_GRACE", "CLOSE_TIMEOUT", "CLOSE_GRACE"]

PEER_ERROR_GRACE = 5.0
# TensorFlow's Session.close waits for every step the session started; a step that
# waits on a node that has gone (its token, its collective) never ends, and a close
# after a failure can wait in gRPC for a server that is gone. Close is bounded: a
# healthy session closes in milliseconds (CLOSE_TIMEOUT is generous); after a
# failure, an interrupt or with a step still running it gets CLOSE_GRACE.
CLOSE_TIMEOUT = 10.0
CLOSE_GRACE = 1.0
# What a step reports when another node of the job went away under it.
_PEER_ERRORS = (tf.errors.UnavailableError, tf.errors.AbortedError, tf.errors.CancelledError,
                tf.errors.InternalError, tf.errors.UnknownError, tf.errors.DeadlineExceededError)


def await_failure(failure, error, grace=PEER_ERROR_GRACE, interval=0.1):
    """The job failure that explains TensorFlow ``error``, waiting up to ``grace`` s for it; or None."""
    return wait_until(failure, grace if isinstance(error, _PEER_ERRORS) else 0.0, interval)


_CALLERS = weakref.WeakSet()   # every WatchedCaller of this process (``calls_in_flight``)


def calls_in_flight():
    """True while a call some ``WatchedCaller`` was given has not returned (one a failure left behind)."""
    return any(caller.in_flight for caller in list(_CALLERS))


class WatchedCaller:
    """Run calls on a daemon thread while this thread watches for a job failure.

    A step that waits on a dead peer (a collective, a token queue) never
    returns, and neither closing the session nor killing a server unblocks it.
    The caller's thread therefore only waits, checking ``failure()`` twice a
    second, and raises the failure as soon as there is one; the stuck call is
    left on its daemon thread, which does not keep the process alive.
    ``close()`` ends the thread after its last call (use ``with`` for one call).
    """

    def __init__(self, failure, interval=0.5):
        self._failure = failure
        self._interval = interval
        self._calls = queue.Queue()
        self._pending = 0   # calls put and not finished
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name="autodist-session-run", daemon=True)
        self._thread.start()
        _CALLERS.add(self)

    @property
    def in_flight(self):
        """True while a call is queued or running (also one a failure left behind)."""
        return self._pending > 0

    def _serve(self):
        while True:
            item = self._calls.get()
            if item is None:   # closed
                return
            fn, box, done = item
            try:
                box.append((True, fn()))
            except BaseException as e:  # handed back to the waiting thread
                box.append((False, e))
            with self._lock:
                self._pending -= 1
            done.set()

    def close(self):
        """No more calls: the thread ends once the call it runs (if any) returns."""
        self._closed = True
        self._calls.put(None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __call__(self, fn):
        if self._closed:   # nothing serves the queue any more
            raise RuntimeError("a call on a closed WatchedCaller")
        box, done = [], threading.Event()
        with self._lock:
            self._pending += 1
        self._calls.put((fn, box, done))
        while not done.wait(self._interval):
            failure = self._failure()
            if failure is not None:
                raise failure
        ok, value = box[0]
        if ok:
            return value
        raise value


class DistributedSession(tf_session.SessionInterface):
    """A session on this node's distributed graph that speaks the user's graph."""

    def __init__(self, session, mapper, original_graph, failure=None, on_interrupt=None, monitor=None,
                 tracer=None, scalars=None, micro_steps=None):
        self._session = session
        self._micro = micro_steps or MicroSteps({}, 1, ())   # gradient accumulation (``runtime.session.micro_steps``)
        self._monitor = monitor   # a StepMonitor (``autodist.runtime.watch.step_report``), or None
        self._sync = SyncIndex(session.graph) if monitor is not None else None   # which calls are training steps
        self._tracer = tracer     # a StepTracer (``autodist.runtime.watch.timeline``), or None
        self._scalars = scalars   # a ScalarLog (``autodist.runtime.watch.summaries``), or None
        self._mapper = mapper
        self._original = original_graph
        self._version = original_graph.version
        self._last_op_id = max((op._id for op in original_graph.get_operations()), default=0)
        self._failure = failure or (lambda: None)
        self._on_interrupt = on_interrupt
        self._caller = WatchedCaller(self._failure) if failure is not None else None
        self._plans = RunPlans(session, mapper)
        self._closed = False
        self._interrupted = False
        self.after_run = []   # callables(session) after each ``run`` (``checkpoint.resume.SessionCheckpoints``)

    @property
    def graph(self):
        """The user's graph (the one fetches and feeds refer to)."""
        return self._original

    @property
    def at_update_boundary(self):
        """False while gradients are being accumulated: a call since the last update ran a micro-step only
        (checkpoints wait for the boundary, where the accumulators are zero)."""
        return self._micro.at_update_boundary

    @property
    def distributed_graph(self):
        return self._session.graph

    @property
    def sess_str(self):
        return self._session.sess_str

    def trains(self, fetches):
        """Whether running ``fetches`` runs a training op: the call is a training step."""
        return self._mapper.trains(flatten_fetches(fetches)[0])

    def element(self, fetch):
        """The op or tensor of the user's graph that ``fetch`` names (a name, a tensor, an op, a variable)."""
        return self._mapper.element(fetch)

    def _check_graph(self, items):
        """Refuse fetches and feeds of ops created after the session (the distributed graph lacks them)."""
        if self._original.version == self._version:
            return
        for item in items:
            element = self._mapper.element(item)
            op = element if isinstance(element, tf.Operation) else element.op
            if op._id > self._last_op_id:
                raise GraphChangedError(
                    "'{}' was added to the graph after create_distributed_session() (the graph had {} ops "
                    "then, {} now), so the distributed graph does not have it; build the whole model, loss "
                    "and train op before creating the session".format(op.name, self._version,
                                                                      self._original.version))

    def _map_feeds(self, feed_dict):
        feeds = {}
        for key, value in (feed_dict or {}).items():
            feeds.update(self._mapper.feed(key, value))
        return feeds

    def run(self, fetches, feed_dict=None, options=None, run_metadata=None):
        values = self._run(fetches, feed_dict, options, run_metadata)
        for callback in self.after_run:
            callback(self)
        return values

    def _run(self, fetches, feed_dict, options, run_metadata):
        feed_dict = component_feeds(feed_dict)
        observed = self._tracer is not None or self._scalars is not None
        plain = options is None and run_metadata is None and not observed
        if plain:   # a repeated signature runs its cached plan (``run_plans``)
            key, held, plan = self._plans.lookup(fetches, feed_dict, flatten_fetches)
            bound = plan.bind(feed_dict.values() if feed_dict else ()) if plan is not None else None
            if bound is not None:
                accumulated = self._micro.accumulated(plan.names)
                if accumulated and self._micro.next_is_micro(accumulated):
                    plan = self._plans.variant(plan, self._micro.twins(plan.names))
                    bound = plan.bind(feed_dict.values() if feed_dict else ())
                step, rows = bound
                return plan.unflatten(self._run_call(step, rows, plan.names, plan.trains))
        leaves, pack = flatten_fetches(fetches)
        self._check_graph(leaves + list(feed_dict or {}))
        names, unflatten = map_fetches(self._mapper, leaves, pack)
        accumulated = self._micro.accumulated(names)
        if accumulated and self._micro.next_is_micro(accumulated):
            names = self._micro.twins(names)
        feeds = self._map_feeds(feed_dict)
        examples = self._examples(feed_dict)
        trains = self._mapper.trains(leaves) if self._monitor is not None else True
        if observed:
            return unflatten(self._observed(names, feeds, examples, options, run_metadata, trains))
        values = self._run_names(names, feeds, examples, options, run_metadata, trains)
        if plain:
            self._plans.ran(key, held)
        return unflatten(values)

    def _examples(self, feed_dict):
        """The rows this node feeds in a step, counted only when a monitor or the scalars report them."""
        return self._mapper.rows(feed_dict) if self._monitor is not None or self._scalars is not None else 0

    def _run_names(self, names, feeds, examples, options, run_metadata, trains=True):
        return self._run_call(lambda: self._session.run(names, feeds, options=options, run_metadata=run_metadata),
                              examples, names, trains)

    def _run_call(self, fn, examples=0, names=(), trains=True):
        """One watched call of the inner session running ``names`` (``examples``: the rows it feeds; ``trains``: it
        runs a training op); the end of a tf.data input explained."""
        try:
            return self._call(fn, examples, self._sync is not None and self._sync.synchronizes(names), trains)
        except tf.errors.OutOfRangeError as e:
            raise explained_end_of_input(e, self._mapper.assignment) from e
        except tf.errors.InvalidArgumentError as e:   # uneven_inputs: the job's input has ended on every node
            if is_end_of_input(e):
                raise end_of_input(e) from e
            raise

    def _observed(self, names, feeds, examples, options, run_metadata, trains):
        """A call traced on the steps the tracer chooses and timed for the scalars (the views are on)."""
        traced = self._tracer.options() if self._tracer is not None else None   # counts every call
        if traced is not None and options is None and run_metadata is None:
            options, run_metadata, start_us = traced
        else:
            traced = None   # the caller's own options win
        started = time.monotonic()
        values = self._run_names(names, feeds, examples, options, run_metadata, trains)
        if self._scalars is not None:
            self._scalars.step(time.monotonic() - started, examples)
        if traced is not None:
            self._tracer.finish_step(run_metadata, start_us)
        return values

    def _call(self, fn, examples=0, sync=False, trains=True):
        monitor = self._monitor
        if monitor is not None:
            monitor.started(sync)
        try:
            # a closed session's call runs here, where TensorFlow refuses it at once
            return self._caller(fn) if self._caller is not None and not self._closed else fn()
        except tf.errors.OpError as e:
            failure = await_failure(self._failure, e) if self._caller is not None else None
            if failure is not None:
                raise failure from e
            raise
        except KeyboardInterrupt:
            self._interrupted = True
            if self._on_interrupt is not None:
                self._on_interrupt()
            raise
        finally:
            if monitor is not None:
                monitor.finished(examples, trains)

    def make_callable(self, fetches, feed_list=None, accept_options=False):
        feed_list = list(feed_list or [])

        def call(*args, **kwargs):
            if len(args) != len(feed_list):
                raise SessionError("this callable takes {} feed values, got {}".format(len(feed_list), len(args)))
            options = kwargs.pop("options", None) if accept_options else None
            run_metadata = kwargs.pop("run_metadata", None) if accept_options else None
            return self.run(fetches, dict(zip(feed_list, args)), options=options, run_metadata=run_metadata)
        return call

    def partial_run_setup(self, fetches, feeds=None):
        raise SessionError("partial runs are not supported by the distributed session")

    def partial_run(self, handle, fetches, feed_dict=None):
        raise SessionError("partial runs are not supported by the distributed session")

    def close(self):
        """Close the TensorFlow session, bounded (see ``close_bounded``); idempotent."""
        if self._closed:
            return
        self._closed = True
        troubled = self._interrupted or self._failure() is not None or (
            self._caller is not None and self._caller.in_flight)
        if self._caller is not None:
            self._caller.close()
        close_bounded(self._session, troubled)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def close_bounded(session, troubled):
    """Close a ``tf.compat.v1.Session`` within ``CLOSE_GRACE`` s if ``troubled``, else ``CLOSE_TIMEOUT`` s.

    A close that does not finish in time is left on a daemon thread: the
    session goes with the process. That is expected after a failure; on a
    healthy session it is worth a line on stderr.
    """
    bound = CLOSE_GRACE if troubled else CLOSE_TIMEOUT
    if not run_bounded(session.close, bound, name="autodist-session-close") and not troubled:
        print("autodist: the TensorFlow session did not close within {:.0f} s; it is left to the end of the "
              "process".format(bound), file=sys.stderr, flush=True)

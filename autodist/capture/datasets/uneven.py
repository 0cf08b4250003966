"""Uneven inputs: a node whose data ends before the others' neither hangs the job nor reweights it.

Each node reads its own ``tf.data`` pipeline, and nothing tells a node that
another one has run out: the node whose iterator ends stops, the others wait
in the step's synchronization. With ``AutoDist(uneven_inputs=POLICY)`` every
iterator made in the scope reads its dataset one element ahead, so a step
knows, besides its batch, how many rows it holds and whether a next batch
follows (``with_lookahead``); a node that has run out keeps serving its last
batch with zero rows::

    the node's dataset        b1      b2      b3 (partial)   -        -
    get_next                  b1      b2      b3             b3       b3
    rows                      4       4       2              0        0
    next follows              1       1       0              0        0

Those two numbers travel with the gradients, as the gradient of a variable of
their own (``STATE``, two floats, planned and synchronized by the strategy
like any other variable), so every node learns them at the same step:

    replica r, step t        x_v = g_v * rows_r          (each gradient weighed by its rows)
                             progress_r = [rows_r, next_r]
    synchronized (mean)      X_v = sum_r rows_r g_v,r / R,   P = [sum_r rows_r / R, sum_r next_r / R]
    applied                  X_v / P[0] = sum_r rows_r g_v,r / sum_r rows_r      (the mean over the rows)
                             STATE = P
    step t+1 starts          check STATE[1]: POLICY "end":  every replica had a next batch  (== 1)
                                             POLICY "join": some replica had one            (> 0)
                             else the step fails on every node before it reads a batch, and the
                             session raises OutOfRangeError there: the epoch has ended

So the update of a step is the gradient of the mean loss over the rows the
replicas actually held: exact against one device trained on those rows
(losses that are means over their batch, as everywhere in autodist). A
replica without data contributes nothing ("join", as Horovod's ``join``), or
the epoch ends for every node at the first node's end ("end"). The
rewiring of the gradients happens on this node's copy of the graph
(``autodist.kernel.uneven_inputs``); here, inside the user's graph, only
what planning must see: the state variable and its gradient record
(``attach``, when the session is created).

Re-initializing the iterator starts a new epoch: its ``initializer`` also
sets the state back (``RESET``). An element's rows are the size of the first
dimension of its first component (elements are batches); an element whose
first component is a scalar counts one row.
"""
import tensorflow as tf

from autodist.capture.queries import ancestors, half_gradient_dtypes
from autodist.errors import CaptureError

__all__ = ["POLICIES", "STATE", "PROGRESS", "CHECK", "END_OF_INPUT", "with_lookahead", "state_variable",
           "LookaheadIterator", "attach", "is_end_of_input", "end_of_input", "reads_ahead", "half_wire_dtypes"]

POLICIES = ("end", "join")
SCOPE = "AutoDist-Input/"
STATE = SCOPE + "state"          # the synchronized [mean rows, mean next] of the last step
PROGRESS = SCOPE + "progress"    # a replica's [rows, next] of its step: the state's gradient
CHECK = SCOPE + "check"          # the assertion a step's get_next waits for
UPDATE = SCOPE + "update"        # the state's update (the train ops wait for it)
END_OF_INPUT = "AutoDist-EndOfInput"   # marks the check's failure (the session raises OutOfRangeError)
_GET_NEXTS = "autodist_uneven_get_next"   # graph collection: "rows tensor,next tensor" of each wrapped get_next


def _filler(spec):
    if not isinstance(spec, tf.TensorSpec) or spec.shape.rank is None:
        raise CaptureError("uneven_inputs: a dataset element component {} is not a tensor of known rank; the "
                           "look-ahead needs dense tensors (map sparse or ragged components to dense ones, or "
                           "leave uneven_inputs off)".format(spec))
    return tf.zeros([0 if d is None else d for d in spec.shape.as_list()], spec.dtype)


def _rows(element):
    first = tf.nest.flatten(element)[0]
    if first.shape.rank == 0:
        return tf.constant(1.0)
    return tf.cast(tf.shape(first)[0], tf.float32)


def with_lookahead(dataset, depth=1):
    """``dataset`` as ``(element, rows, next)`` triples, endless: after its end, its last element with 0 rows.

    ``next`` is 1 when the element ``depth`` places further exists: a node's
    ``depth`` replicas draw ``depth`` consecutive elements a step, so the flags
    of one step's elements count the replicas that have data in the next.
    """
    spec = dataset.element_spec
    filler = tf.nest.map_structure(_filler, spec)
    flagged = dataset.map(lambda *e: (e[0] if len(e) == 1 else e, tf.constant(True)))
    tail = tf.data.Dataset.from_tensors((filler, tf.constant(False))).repeat()
    blank = tuple(tf.nest.map_structure(_filler, spec) for _ in range(depth))
    start = (blank, (tf.constant(False),) * depth, tf.constant(0, tf.int64))

    def step(state, item):
        held, valid, count = state            # the last ``depth`` elements, oldest first
        element, present = item
        kept = tf.nest.map_structure(lambda a, b: tf.cond(present, lambda: a, lambda: b), element, held[-1])
        out = (held[0], valid[0], present, count >= depth)
        return (held[1:] + (kept,), valid[1:] + (present,), count + 1), out

    ahead = flagged.concatenate(tail).scan(start, step).filter(lambda element, valid, following, ready: ready)
    return ahead.map(lambda element, valid, following, ready: (
        element, _rows(element) * tf.cast(valid, tf.float32), tf.cast(following, tf.float32)))


def state_variable(graph):
    """The graph's state variable ([mean rows, mean next] of the last step), made on first use."""
    found = [v for v in graph.get_collection(tf.compat.v1.GraphKeys.LOCAL_VARIABLES) if v.op.name == STATE]
    if found:
        return found[0]
    with graph.as_default(), graph.name_scope(None), graph.control_dependencies(None), tf.device(None):
        return tf.compat.v1.Variable([0.0, 1.0], name=STATE, trainable=False, use_resource=True,
                                     collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES])


class LookaheadIterator(tf.compat.v1.data.Iterator):
    """The iterator the user gets: ``get_next`` gives the dataset's elements; the look-ahead stays inside."""

    def __init__(self, inner, dataset, state):
        self._inner = inner
        super().__init__(inner._iterator_resource, None, tf.compat.v1.data.get_output_types(dataset),
                         tf.compat.v1.data.get_output_shapes(dataset), tf.compat.v1.data.get_output_classes(dataset))
        self._initializer = None
        if inner._initializer is not None:
            with tf.name_scope(SCOPE):
                self._initializer = tf.group(inner.initializer, state.assign([0.0, 1.0], read_value=False),
                                             name="initializer")

    def get_next(self, name=None):
        element, rows, following = self._inner.get_next(name=name)
        tf.compat.v1.add_to_collection(_GET_NEXTS, "{},{}".format(rows.name, following.name))
        return element

    def make_initializer(self, dataset, name=None):
        raise CaptureError("uneven_inputs: an iterator made inside the scope reads its own dataset one element "
                           "ahead and cannot be re-pointed at another one; make one iterator per dataset")


def _training_inputs(item):
    """``(rows, next)`` tensors of the wrapped get_next that feeds the recorded gradients, or None."""
    graph = item.graph
    grads = []
    for record in item.grad_records:
        grads.extend(graph.get_tensor_by_name(t) for t in (record.grad, record.values) if t)
    feeding = ancestors([t.op for t in grads])
    found = []
    for entry in graph.get_collection(_GET_NEXTS):
        rows, following = (graph.get_tensor_by_name(name) for name in entry.split(","))
        if rows.op in feeding:
            found.append((rows, following))
    unwrapped = [op.name for op in feeding if op.type in ("IteratorGetNext", "IteratorGetNextSync")
                 and op not in {rows.op for rows, _ in found}]
    if unwrapped or len(found) > 1:
        raise CaptureError(
            "uneven_inputs: the training step reads {}; it must read exactly one iterator made inside the scope "
            "with tf.compat.v1.data.make_one_shot_iterator or make_initializable_iterator (or the dataset's "
            "methods of those names)".format(
                "get_next {} of an iterator made otherwise".format(", ".join(sorted(unwrapped))) if unwrapped
                else "{} such iterators".format(len(found))))
    return found[0] if found else None


def attach(item, policy):
    """Make the state variable's gradient record in ``item``'s graph (when the session is created).

    Returns True when the training step reads a look-ahead iterator (the
    kernel then weighs its gradients), False when it reads no iterator.
    """
    if policy not in POLICIES:
        raise CaptureError("uneven_inputs must be one of {}, got {!r}".format(", ".join(POLICIES), policy))
    inputs = _training_inputs(item)
    if inputs is None:
        return False
    graph = item.graph
    state = state_variable(graph)
    rows, following = inputs
    with graph.as_default(), graph.name_scope(None), graph.control_dependencies(None):
        with tf.device(rows.device):
            progress = tf.stack([rows, following], name=PROGRESS)
        update = state.assign(progress, read_value=False, name=UPDATE)
        ahead = state.read_value()[1]
        ready = ahead >= 1.0 - 1e-6 if policy == "end" else ahead > 0.0
        check = tf.debugging.Assert(ready, [tf.constant("{}({}): the input of {} has ended".format(
            END_OF_INPUT, policy, "a node" if policy == "end" else "every node"))])
        tf.group(check, name=CHECK)
    item.extend_gradient_info([progress], [state], [update])
    return True


def is_end_of_input(error):
    """Whether a TensorFlow error is the check of ``attach`` failing: the epoch has ended."""
    return isinstance(error, tf.errors.InvalidArgumentError) and END_OF_INPUT in (error.message or "")


def end_of_input(error):
    """The ``OutOfRangeError`` every node raises when the check fails (``error``), as an exhausted iterator would."""
    join = END_OF_INPUT + "(join)" in error.message
    return tf.errors.OutOfRangeError(error.node_def, error.op, (
        "End of sequence: [autodist] the epoch has ended for every node: {} (uneven_inputs={!r}; "
        "docs/input_pipelines.md, \"Uneven inputs\")").format(
            "every node's input is exhausted" if join else "the input of a node is exhausted",
            "join" if join else "end"))


def reads_ahead(item):
    """Whether the captured GraphItem's training input is read ahead (``AutoDist(uneven_inputs=...)``)."""
    try:
        item.graph.get_operation_by_name(PROGRESS)
    except KeyError:
        return False
    return True


def half_wire_dtypes(item):
    """``{variable op name: half dtype}`` of the gradients that travel in half precision
    (``queries.half_gradient_dtypes``): none when the input is read ahead. A gradient is then weighed by
    its replica's rows before the synchronization, a product whose range float16 may not hold, so the
    gradients travel in float32 (the planner's byte counts and the kernel both ask here)."""
    return {} if reads_ahead(item) else half_gradient_dtypes(item)

"""Gradient compressors for all-reduce: what goes over the wire, and what is kept back.

    NoneCompressor       flat ---------------------- all-reduce(mean) ------------> flat
                         (small buckets, contract.gathers: all-gather, each replica adds the rows)
    HorovodCompressor    flat -> float16 ----------- all-reduce(sum) -> float32 / R
    HorovodCompressorEF  c = flat + e; q = float16(c); e <- c - q  (error feedback)
                         q ------------------------- all-reduce(sum) -> float32 / R
    PowerSGDCompressor   M + E = M' (as a matrix), P = M'Q, P <- mean(P), P <- orth(P),
                         Q <- mean(M'^T P), grad = P Q^T, E <- M' - grad        (rank r)

The error-feedback residual E and PowerSGD's Q are variables, one per replica,
that persist across steps; every replica starts from the same values (zeros,
and a fixed-seed Q), and sees the same reduced tensors, so the mirrored
variables stay identical. A step whose synchronized gradients are not finite
(an overflow under dynamic loss scaling, whose step the optimizer skips)
leaves them as they were (``keep_state``). One-dimensional tensors are not
worth a low-rank approximation and go through a plain all-reduce.
"""
import numpy as np
import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2
from tensorflow.python.ops import collective_ops, gen_resource_variable_ops

from autodist.errors import TransformError
from autodist.plan.contract import CollectiveSpec, Compressor, gathers
from autodist.plan.names import key_window

__all__ = ["Collectives", "reduce_flat", "powersgd", "gathered_mean", "keep_state"]

_POWERSGD_SEED = 20200215


class Collectives:
    """Collective ops of one job: one group of every replica, instance keys handed out in order.

    Every node walks the variables in the same order, so the k-th collective
    gets the same key on every node. The keys stay in the window of the
    assignment's sync group (``names.KEY_WINDOWS``: "training", or "every-step"
    for its every-step view, whose key base is that window's); a plan that
    needs more fails here, while the graph is built, instead of reusing the
    keys of the init broadcasts (or of another job) at run time.
    """

    def __init__(self, assignment):
        self.assignment = assignment
        self._next = assignment.key_base
        self._window = "every-step" if getattr(assignment, "group", "") else "training"
        first, end = key_window(self._window)
        self._end = assignment.key_base + end - first + 1    # the view's key base is its window's first - 1

    def key(self):
        return self.reserve(1)

    def reserve(self, count):
        """The first of ``count`` consecutive fresh keys."""
        first = self._next + 1
        if self._next + count >= self._end:
            raise TransformError(
                "this plan needs more than the {} collective keys of the job's {!r} window (keys {}..{}): too many "
                "all-reduce collectives; put the variables in fewer all-reduce groups (a larger chunk_size), or some "
                "of them (sparse ones take the most keys) on parameter servers".format(
                    self._end - self.assignment.key_base - 1, self._window, self.assignment.key_base + 1,
                    self._end - 1))
        self._next += count
        return first

    def hint(self, replica, spec):
        gpu = tf.DeviceSpec.from_string(replica.device).device_type == "GPU"
        if spec == CollectiveSpec.RING or not gpu:
            return "ring"
        return "nccl"

    def all_reduce(self, tensor, key, hint, merge="Add", final="Div"):
        return collective_ops.all_reduce_v2(tensor, group_size=self.assignment.num_replicas,
                                            group_key=self.assignment.group_key, instance_key=key,
                                            merge_op=merge, final_op=final, communication_hint=hint)

    def all_gather(self, tensor, key, hint):
        return collective_ops.all_gather_v2(tensor, group_size=self.assignment.num_replicas,
                                            group_key=self.assignment.group_key, instance_key=key,
                                            communication_hint=hint)


def new_variable(name, dtype, shape, initial):
    """A resource variable (in the current name scope): (handle, initializer op).

    Its shared name is its full op name, unique in the graph, so that two
    variables on one device never share a resource.
    """
    handle = gen_resource_variable_ops.var_handle_op(dtype=dtype, shape=shape, shared_name="", name=name)
    handle.op._set_attr("shared_name", attr_value_pb2.AttrValue(s=handle.op.name.encode()))
    init = gen_resource_variable_ops.assign_variable_op(handle, initial, name=name + "_init")
    return handle, init


def _read(handle, dtype):
    return gen_resource_variable_ops.read_variable_op(handle, dtype)


def reduce_flat(collectives, flat, compressor, key, hint, state_name):
    """All-reduce one flat float vector; returns (mean, state writes, new variables).

    A state write is ``(handle, value)``: what an error-feedback residual
    becomes if the step's synchronized gradients are finite (``keep_state``).
    """
    if not flat.dtype.is_floating:
        return collectives.all_reduce(flat, key, hint), [], []
    if compressor == Compressor.NoneCompressor:
        nbytes = flat.shape.num_elements() * flat.dtype.size if flat.shape.is_fully_defined() else None
        if gathers(nbytes, [replica.device for replica in collectives.assignment.replicas]):
            rows = collectives.all_gather(tf.reshape(flat, [1, -1]), key, hint)
            return gathered_mean(rows, collectives.assignment.num_replicas), [], []
        return collectives.all_reduce(flat, key, hint), [], []
    count = tf.cast(collectives.assignment.num_replicas, flat.dtype)
    if compressor == Compressor.HorovodCompressor:
        total = collectives.all_reduce(tf.cast(flat, tf.float16), key, hint, final="Id")
        return tf.cast(total, flat.dtype) / count, [], []
    if compressor == Compressor.HorovodCompressorEF:
        size = flat.shape.num_elements()
        handle, init = new_variable(state_name + "/residual", flat.dtype, [size], tf.zeros([size], flat.dtype))
        corrected = flat + _read(handle, flat.dtype)
        sent = tf.cast(corrected, tf.float16)
        total = collectives.all_reduce(sent, key, hint, final="Id")
        return tf.cast(total, flat.dtype) / count, [(handle, corrected - tf.cast(sent, flat.dtype))], \
            [(handle.op.name, init.name)]
    raise ValueError("compressor {} does not reduce flat vectors".format(compressor))


def gathered_mean(rows, count):
    """The mean of ``count`` replicas' vectors all-gathered as the rows of ``rows``. Every replica adds
    the rows itself, in replica order, so all get the same bits (with two replicas, the ring's
    ``(a + b) / 2``)."""
    return tf.math.add_n(tf.unstack(rows, num=count)) / tf.cast(count, rows.dtype)


def keep_state(writes, results):
    """The ops that make the ``(handle, value)`` state writes, each keeping its variable's value when a
    tensor of ``results`` (the step's synchronized gradients, the same on every replica) is not finite.

    Under dynamic loss scaling an overflow is provoked on purpose and its step is skipped; a residual
    or a PowerSGD state made from it would hold an inf or NaN for good, and every later step would be
    skipped too. Kept instead, the next finite step trains from the state of the last good one.
    """
    if not writes:
        return []
    finite = tf.reduce_all(tf.stack([tf.reduce_all(tf.math.is_finite(t)) for t in results]), name="finite")
    return [gen_resource_variable_ops.assign_variable_op(handle, tf.where(finite, value, _read(handle, value.dtype)))
            for handle, value in writes]


def powersgd(collectives, grad, rank, keys, hint, state_name):
    """Rank-``rank`` PowerSGD with error feedback; returns (approximate mean, state writes, new variables)."""
    shape = grad.shape.as_list()
    rows, cols = shape[0], int(np.prod(shape[1:]))
    rank = max(1, min(rank, rows, cols))
    dtype = grad.dtype
    q_init = tf.random.stateless_normal([cols, rank], seed=[_POWERSGD_SEED, rows * 7919 + cols], dtype=dtype)
    q_handle, q_init_op = new_variable(state_name + "/q", dtype, [cols, rank], q_init)
    e_handle, e_init_op = new_variable(state_name + "/error", dtype, [rows, cols], tf.zeros([rows, cols], dtype))
    matrix = tf.reshape(grad, [rows, cols]) + _read(e_handle, dtype)
    p = collectives.all_reduce(tf.matmul(matrix, _read(q_handle, dtype)), keys[0], hint)
    p, _ = tf.linalg.qr(p)
    q = collectives.all_reduce(tf.matmul(matrix, p, transpose_a=True), keys[1], hint)
    approx = tf.matmul(p, q, transpose_b=True)
    writes = [(e_handle, matrix - approx), (q_handle, q)]
    new_vars = [(q_handle.op.name, q_init_op.name), (e_handle.op.name, e_init_op.name)]
    return tf.reshape(approx, shape), writes, new_vars

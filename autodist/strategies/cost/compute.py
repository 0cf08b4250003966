"""One replica's compute: the captured graph's single-device step, measured or estimated.

    compute = measure_compute(graph_item, batch=32)              # runs it here, cached per graph
    compute = estimate_compute(graph_item, calibration, batch=32)  # counts its float operations

``measure_compute`` imports the captured graph into a fresh graph (the
GraphItem is not touched), feeds every placeholder a synthetic batch (an
unknown dimension becomes ``batch``; ids are zeros, floats are seeded
normals), initializes the variables and times the train ops: ``warmup``
untimed steps, then the median of ``steps``. The first run also fetches the
indices of every sparse gradient, whose length is the rows one replica touches
per step (``Compute.sparse_rows``). The result is cached under the calibration
directory by a hash of the graph and the batch.

``estimate_compute`` is for graphs nothing can run here (planning for GPUs on
paper, and every AutoStrategy job, whose nodes must all derive the same plan):
``3 x`` the forward float operations of MatMul, BatchMatMul and Conv2D (forward,
and the two products of backprop) over ``Calibration.flops``, plus each op the
train step runs at ``Calibration.op_s`` (the executor's cost of an op, whatever
it computes) and the bytes those ops write at ``Calibration.local_bandwidth``
(activations, their gradients: a small model's elementwise work on CPUs). On
the paper table's scaled families (``benchmarks/paper_table_model.py``, one
replica alone on a core) this estimated 0.40-0.78x the measured step of the
CNNs (their convolutions' backprop runs below the matrix product's rate) and
1.24x VGG16's with the 4-host probe's figures (0.12 us an op), and 1.11x BERT's
at 1 us an op; float operations alone gave 0.05-0.16x, VGG16 0.8x.
An input's unknown batch dimension is ``batch`` examples; a tensor
flattened from it (``reshape(x, [-1, k])``: a sequence model's dense layers)
keeps the elements of the tensor it came from.
"""
import dataclasses
import hashlib
import json
import os
import statistics
import time

from autodist.fileio import atomic_write_bytes, make_private_dirs
from autodist.strategies.cost.calibration import DEFAULT_CALIBRATION_DIR
from autodist.strategies.cost.model import Compute

__all__ = ["measure_compute", "estimate_compute", "estimate_rows", "measure_or_estimate", "forward_flops",
           "step_ops", "graph_key", "TRAIN_FLOPS_FACTOR"]

#: A training step's float operations per forward one (forward, input gradient, weight gradient).
TRAIN_FLOPS_FACTOR = 3.0


def graph_key(graph_item, batch):
    """16 hex digits naming a captured graph (its GraphDef and train ops) at a batch size."""
    digest = hashlib.sha256(graph_item.graph_def.SerializeToString(deterministic=True))
    digest.update(json.dumps([sorted(graph_item.train_op_names), batch]).encode())
    return digest.hexdigest()[:16]


def _cache_path(graph_item, batch, directory):
    return os.path.join(os.path.expanduser(directory or DEFAULT_CALIBRATION_DIR),
                        "compute-{}.json".format(graph_key(graph_item, batch)))


def measure_compute(graph_item, batch, steps=10, warmup=3, directory=None, use_cache=True):
    """The measured :class:`~.model.Compute` of one replica's step on ``batch`` examples."""
    path = _cache_path(graph_item, batch, directory)
    if use_cache and os.path.exists(path):
        with open(path, encoding="utf-8") as handle:
            return Compute(**json.load(handle))
    compute = _run(graph_item, batch, steps, warmup)
    try:
        make_private_dirs(os.path.dirname(path))
        atomic_write_bytes(path, json.dumps(compute.to_dict()).encode(), mode=0o600)
    except OSError:   # a cache: a full disk or a read-only home costs the next call a measurement, no more
        pass
    return compute


def _feeds(graph, batch, np):
    rng = np.random.RandomState(0)
    feeds = {}
    for op in graph.get_operations():
        if op.type != "Placeholder":
            continue
        out = op.outputs[0]
        dims = out.shape.as_list() if out.shape.rank is not None else [batch]
        shape = [batch if d is None else d for d in dims]
        dtype = out.dtype.as_numpy_dtype
        feeds[out] = (np.zeros(shape, dtype) if out.dtype.is_integer or out.dtype.is_bool
                      else rng.standard_normal(shape).astype(dtype))
    return feeds


def _tensor_name(name):
    return name if ":" in name else name + ":0"


def _initializers(graph_item, tf):
    """Initializer op names: the item's, and those of the variables and tables its graph collects."""
    keys = tf.compat.v1.GraphKeys
    source = graph_item.graph
    names = list(graph_item.info.initializers)
    for key in (keys.GLOBAL_VARIABLES, keys.LOCAL_VARIABLES):
        names += [v.initializer.name for v in source.get_collection(key)]
    names += [op.name for op in source.get_collection(keys.TABLE_INITIALIZERS)]
    return list(dict.fromkeys(names))


def _run(graph_item, batch, steps, warmup):
    import numpy as np
    import tensorflow as tf
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(graph_item.graph_def, name="")
    initializers = [graph.get_operation_by_name(name) for name in _initializers(graph_item, tf)]
    train = [graph.get_operation_by_name(name) for name in graph_item.train_op_names]
    sparse = {_tensor_name(r.target): graph.get_tensor_by_name(r.indices)
              for r in graph_item.grad_records if r.is_sparse}
    feeds = _feeds(graph, batch, np)
    with tf.compat.v1.Session(graph=graph) as session:
        session.run(initializers)
        _, indices = session.run([train, sparse], feeds)
        for _ in range(max(warmup - 1, 0)):
            session.run(train, feeds)
        times = []
        for _ in range(steps):
            started = time.perf_counter()
            session.run(train, feeds)
            times.append(time.perf_counter() - started)
    rows = {name: float(np.size(value)) for name, value in indices.items()}
    return Compute(step_s=statistics.median(times), source="measured", sparse_rows=rows, batch=batch)


def _dims(tensor, batch):
    if tensor.shape.rank is None:
        return None
    return [batch if d is None else d for d in tensor.shape.as_list()]


def forward_flops(graph, batch):
    """Float operations of the MatMul, BatchMatMul and Conv2D ops of ``graph`` (unknown dims = ``batch``; a
    flattened tensor has the elements of the one it came from: ``_elements``)."""
    total = 0.0
    for op in graph.get_operations():
        if op.name.find("gradients") >= 0:
            continue
        if op.type in _MATMULS:
            out = _dims(op.outputs[0], batch)
            if out:   # every element of the left operand meets each of the output's columns once
                total += 2.0 * _elements(op.inputs[0], batch) * out[-1]
        elif op.type == "Conv2D":
            kernel, out = _dims(op.inputs[1], batch), _dims(op.outputs[0], batch)
            if kernel and out:
                total += 2.0 * kernel[0] * kernel[1] * kernel[2] * _elements(op.outputs[0], batch)
    return total


_MATMULS = frozenset({"MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3"})
#: Ops whose output has as many elements as their first input (``_elements`` looks through them).
_SAME_SIZE_OPS = frozenset({"Reshape", "Identity", "Cast", "Squeeze", "ExpandDims", "Transpose"})


def _elements(tensor, batch):
    """Elements of ``tensor`` at ``batch`` examples: its static shape with an unknown dimension taken as
    ``batch``, or, where a reshape hid more than that (``[None, 16, 128]`` flattened to ``[None, 128]`` holds
    16 x ``batch`` rows), the elements of the tensor it was reshaped from."""
    found = None
    for _ in range(16):   # a short chain of reshapes and casts at most
        dims = _dims(tensor, batch)
        if dims is not None:
            found = max(found or 0.0, _prod(dims))
            if None not in tensor.shape.as_list():
                break
        if tensor.op.type not in _SAME_SIZE_OPS or not tensor.op.inputs:
            break
        tensor = tensor.op.inputs[0]
    return float(found if found is not None else batch)


def step_ops(graph_item, batch):
    """``(ops, bytes)`` of one training step: how many ops the train ops need (inputs and control inputs)
    and the bytes their outputs hold at ``batch`` examples (``_elements``; constants and handles apart)."""
    from autodist.capture.queries import ancestors
    graph = graph_item.graph
    needed = ancestors([graph.get_operation_by_name(name) for name in graph_item.train_op_names])
    nbytes = sum(_elements(t, batch) * t.dtype.size for op in needed if op.type not in _NOT_WRITTEN
                 for t in op.outputs if t.dtype.is_floating or t.dtype.is_integer)
    return len(needed), nbytes


#: Ops whose outputs a step does not write: constants, placeholders (fed), variable handles.
_NOT_WRITTEN = frozenset({"Const", "Placeholder", "PlaceholderWithDefault", "VarHandleOp", "NoOp"})


def _prod(dims):
    result = 1.0
    for d in dims:
        result *= d
    return result


def estimate_compute(graph_item, calibration, batch):
    """The estimated :class:`~.model.Compute`: ``3 x`` forward float operations at ``calibration.flops``, the
    step's ops at ``calibration.op_s`` each and their outputs' bytes at ``calibration.local_bandwidth``."""
    flops = TRAIN_FLOPS_FACTOR * forward_flops(graph_item.graph, batch)
    ops, nbytes = step_ops(graph_item, batch)
    graph = graph_item.graph
    sparse = {_tensor_name(r.target): estimate_rows(graph.get_tensor_by_name(r.indices), batch)
              for r in graph_item.grad_records if r.is_sparse}
    step = flops / calibration.flops + ops * calibration.op_s + nbytes / calibration.local_bandwidth
    return Compute(step_s=step, source="estimate", sparse_rows=sparse, batch=batch)


def estimate_rows(indices, batch):
    """Rows a sparse gradient's ``indices`` hold at ``batch`` examples: their elements (``_elements``: the
    lookup's ids flattened, ``[batch, 16]`` to ``[-1]``, are 16 rows an example)."""
    return _elements(indices, batch)


def measure_or_estimate(graph_item, calibration, batch, directory=None):
    """Measured when the graph runs here on synthetic feeds, else estimated (``source`` says why)."""
    import tensorflow as tf
    try:
        return measure_compute(graph_item, batch, directory=directory)
    except (tf.errors.OpError, ValueError, TypeError, KeyError) as exc:
        estimate = estimate_compute(graph_item, calibration, batch)
        return dataclasses.replace(estimate, source="estimate (the graph did not run here: {})".format(
            type(exc).__name__))

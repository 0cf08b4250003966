"""The matrices' models are sparse as declared: Parallax runs on the sparse ones only (``tests/dedupe.py``).

A model a matrix calls dense must have no sparse (``tf.IndexedSlices``)
gradient, else leaving Parallax out would lose the parameter-server path it
takes for that variable, and its variables must stay far below AllReduce's
16 MiB bucket; one it calls sparse must have a sparse gradient. On every
topology, the equivalence models' Parallax plans are AllReduce's but for the
spec exactly when they are dense. Graphs only, no session.
"""
import os
import sys

import numpy as np
import pytest
import tensorflow as tf

import eq_harness as harness
from dedupe import without_spec
from eq_models import MODELS, SPARSE_MODELS

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "runtime", "keras"))

import keras_fit_models  # noqa: E402
import keras_options  # noqa: E402

tf1 = tf.compat.v1


BUCKET = 16 * 2 ** 20   # AllReduce()'s bucket_bytes


@pytest.mark.parametrize("model", sorted(MODELS))
def test_an_equivalence_model_has_sparse_gradients_as_declared(model, tmp_path):
    from autodist.capture.graph_item import GraphItem
    from autodist.capture.optimizers import capture_optimizers
    from autodist.spec.resource_spec import ResourceSpec
    from autodist.strategies import AllReduce, Parallax
    from autodist.strategies.inputs import builder_variables
    graph = tf.Graph()
    with graph.as_default():
        item = GraphItem(graph)
        with capture_optimizers(), item.as_default():
            MODELS[model][0]()
        item.prepare()
    variables = builder_variables(item)
    assert any(v.is_sparse for v in variables) == (model in SPARSE_MODELS)
    assert sum(v.byte_size for v in variables) < BUCKET   # so no all-reduce group reaches it
    for topology, nodes in sorted(harness.TOPOLOGIES.items()):
        spec = ResourceSpec(harness.write_spec(tmp_path, nodes))
        plans = [without_spec(b.build_from_variables(variables, spec)) for b in (Parallax(), AllReduce())]
        assert (plans[0] == plans[1]) == (model not in SPARSE_MODELS), topology


def _keras_sparse(build, inputs):
    """Whether the gradients of the Keras model ``build()`` makes, taken in a graph, include a sparse one (and its
    weights are far below a bucket)."""
    with tf.Graph().as_default():
        model = build()
        x = tf1.placeholder(inputs.dtype, (None,) + inputs.shape[1:])
        loss = tf.reduce_sum(tf.cast(model(x), tf.float32))
        assert sum(int(np.prod(w.shape)) * np.dtype(w.dtype).itemsize for w in model.weights) < BUCKET
        return any(isinstance(g, tf.IndexedSlices) for g in tf.gradients(loss, [w.value for w in model.weights]))


@pytest.mark.parametrize("kind", keras_fit_models.KINDS)
def test_a_keras_fit_kind_has_sparse_gradients_as_declared(kind):
    sparse = _keras_sparse(lambda: keras_fit_models.build(kind), keras_fit_models.data(kind)[0])
    assert sparse == (kind in keras_fit_models.SPARSE_KINDS)


def test_the_models_of_dense_cells_have_no_sparse_gradient():
    """The option table's model, the accumulated ``ad.function`` model, the inf-gradient case's Dense layer."""
    import keras
    import eq_accumulation
    assert not _keras_sparse(lambda: keras_options.model("clipnorm"), keras_options.data()[0])
    assert not _keras_sparse(lambda: eq_accumulation._keras_parts()[0], eq_accumulation._function_batch(0)[0])
    assert not _keras_sparse(lambda: keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, name="scaled")]),
                             np.zeros((2, 3), np.float32))

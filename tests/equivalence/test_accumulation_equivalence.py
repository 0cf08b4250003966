"""Gradient accumulation: k = 4 micro-steps of batch b under every synchronous builder == one step of batch 4b.

For the dense (linear regression), CNN and Keras Embedding models, each pair of
builder and model on one node with two replicas or on two loopback nodes (every
builder and every model on both: ``test_equivalence.cells``), through ``sess.run``; through
``ad.function`` with a Keras model on two nodes (Parallax on the sparse model
only: ``tests/dedupe.py``). The per-example losses of
every micro-step and the final variables on every node equal one device
training on the concatenated micro-batches (``eq_accumulation``). k = 1 is the
main matrix (``test_equivalence.py``). Keras ``fit`` with accumulation is in
``test_keras_fit_equivalence.py`` (two nodes) and ``tests/runtime/keras/test_keras_fit.py``
(one node).
"""
import functools

import pytest

import eq_accumulation as accumulation
import eq_harness as harness
from dedupe import builders_for
from test_equivalence import BUILDERS, _rows, cells

pytestmark = pytest.mark.slow

MODELS = ("linreg", "cnn", "keras_embedding")
TOPOLOGIES = ("1node-2replicas", "2nodes-1+1")


@functools.lru_cache(maxsize=None)
def _reference(model):
    return accumulation.reference(model)


@pytest.mark.parametrize("builder,model,topology", cells(MODELS, TOPOLOGIES, per_pair=1))
def test_accumulated_steps_equal_one_large_step(builder, model, topology, pools, tmp_path):
    case = harness.new_case(builder, model, tmp_path, module="eq_accumulation",
                            accumulation_steps=accumulation.K)
    accumulation.check(_reference(model), pools(topology).run(case, _rows(topology)))


@functools.lru_cache(maxsize=None)
def _function_reference():
    return accumulation.function_reference()


@pytest.mark.pool("2nodes-1+1")
@pytest.mark.parametrize("builder", builders_for(BUILDERS, sparse=False))   # a Keras model of Dense layers
def test_accumulated_ad_function_steps_equal_one_large_step(builder, pools, tmp_path):
    case = harness.new_case(builder, "keras", tmp_path, accumulation_steps=accumulation.K,
                            module="eq_accumulation_function")
    topology = "2nodes-1+1"
    accumulation.check(_function_reference(), pools(topology).run(case, _rows(topology)))

"""runtime.autorun.eager_keras: an unmodified Keras ``fit`` script under ``run_script`` equals running it alone.

The script builds and compiles its model eagerly and knows nothing about
autodist; run alone it is the single-device reference, run by ``run_script``
on one node with two CPU replicas its ``fit``/``evaluate``/``predict`` run on
the distributed twin (50 rows in batches of 16: a last partial batch of 2).
"""
import os
import runpy
import sys
import textwrap

import keras
import numpy as np
import pytest

from autodist import AutoDist
from autodist.errors import CaptureError
from autodist.runtime.autorun.run import run_script
from autodist.strategies import AllReduce

SCRIPT = """
import sys
import keras
import numpy as np

rng = np.random.RandomState(0)
x = rng.randn(50, 4).astype(np.float32)
y = rng.randint(0, 3, 50).astype(np.int32)
keras.utils.set_random_seed(1)
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(3)])
model.compile(optimizer=keras.optimizers.Adam(0.05),
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
              metrics=["accuracy", keras.metrics.SparseCategoricalCrossentropy(from_logits=True, name="xent")])
start = model.get_weights()
first = model.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0, validation_data=(x[:20], y[:20])).history
second = model.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0).history   # continues training
trained = model.get_weights()                                              # the script's own (eager) model
evaluated = model.evaluate(x, y, batch_size=16, verbose=0)
predicted = model.predict(x[:7], verbose=0)
model.set_weights(start)                                                   # the next call uses these
evaluated_at_start = model.evaluate(x, y, batch_size=16, verbose=0)
np.savez(sys.argv[1], weights=np.concatenate([w.ravel() for w in trained]), evaluated=evaluated,
         predicted=predicted, evaluated_at_start=evaluated_at_start,
         **{"first_" + k: v for k, v in first.items()}, **{"second_" + k: v for k, v in second.items()})
"""


CUSTOM_STEP = """
import sys
import keras
import numpy as np

sys.path.insert(0, {helpers!r})
from keras_custom_models import GuideStep      # a keras.Model subclass with its own train_step

rng = np.random.RandomState(0)
x, y = rng.randn(51, 4).astype(np.float32), rng.randint(0, 3, 51).astype(np.int32)
keras.utils.set_random_seed(1)
inputs = keras.Input((4,))
model = GuideStep(inputs, keras.layers.Dense(3)(keras.layers.Dense(8, activation="relu")(inputs)))
model.compile(optimizer=keras.optimizers.Adam(0.05), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
              metrics=["accuracy"])
history = model.fit(x, y, batch_size=16, epochs=3, shuffle=False, verbose=0).history
np.savez(sys.argv[1], weights=np.concatenate([w.ravel() for w in model.get_weights()]), **history)
""".format(helpers=os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "keras"))


def _write(tmp_path, text, name="script.py"):
    script = tmp_path / name
    script.write_text(textwrap.dedent(text))
    return str(script)


def _alone(script, args):
    saved = list(sys.argv)
    sys.argv = [script] + args
    try:
        runpy.run_path(script, run_name="__main__")
    finally:
        sys.argv = saved


@pytest.mark.parametrize("text", [SCRIPT, CUSTOM_STEP], ids=["sequential", "custom-train-step"])
def test_unmodified_fit_script_equals_running_it_alone(spec, tmp_path, text):
    script = _write(tmp_path, text)
    keras.backend.clear_session(free_memory=False)
    _alone(script, [str(tmp_path / "alone.npz")])
    originals = {name: getattr(keras.Model, name) for name in ("fit", "evaluate", "predict", "compile")}
    keras.backend.clear_session(free_memory=False)
    assert run_script(AutoDist(spec, AllReduce()), script, [str(tmp_path / "run.npz")]) == 0
    assert {name: getattr(keras.Model, name) for name in originals} == originals
    alone, run = np.load(tmp_path / "alone.npz"), np.load(tmp_path / "run.npz")
    assert sorted(alone.files) == sorted(run.files)
    for key in alone.files:
        np.testing.assert_allclose(run[key], alone[key], rtol=1e-4, atol=1e-5, err_msg=key)


PRELUDE = """
import keras
import numpy as np
x, y = np.zeros((8, 4), np.float32), np.zeros(8, np.int32)

def dense():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    return model
"""


@pytest.mark.parametrize("body,message", [
    ("dense().fit(x, y, verbose=0)\ndense().fit(x, y, verbose=0)", "one Keras model per script"),
    ("keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)]).predict(x)", "needs a compiled model"),
    ("""
     class Scaled(keras.Model):
         def __init__(self, factor):
             super().__init__()
             self.factor = factor
             self.dense = keras.layers.Dense(3)
         def call(self, x):
             return self.dense(x) * self.factor
         def get_config(self):
             return {}
     model = Scaled(np.float32(2.0))
     model(x)
     model.compile(optimizer="sgd", loss="mse")
     model.fit(x, y, verbose=0)
     """, "could not be rebuilt"),
    ("dense().predict(x)", "comes after the model's first fit or evaluate"),
], ids=["two-models", "uncompiled", "not-rebuildable", "predict-first"])
def test_what_cannot_be_distributed_is_a_clear_error(spec, tmp_path, body, message):
    script = _write(tmp_path, PRELUDE + textwrap.dedent(body))
    keras.backend.clear_session(free_memory=False)
    with pytest.raises(CaptureError, match=message):
        run_script(AutoDist(spec, AllReduce()), script, [])

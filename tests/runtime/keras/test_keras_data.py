"""autodist.runtime.keras.data: fit/evaluate/predict's data arguments, equal to plain Keras on one device.

``class_weight``, ``steps_per_epoch`` (arrays and datasets), ``validation_split``,
``validation_steps``, ``evaluate(steps=)``, ``predict(steps=)`` and a
``keras.utils.PyDataset`` give the histories, metrics, predictions and weights
of single-device eager Keras (the dense model of ``keras_fit_models``: 50 rows,
global batches of 16, the last one of 2; one node, two replicas). What Keras
refuses, or what could not run as on one device, raises ``ArgumentError``
naming the argument (issue 33, items 3, 4, 5).
"""
import keras
import numpy as np
import pytest
import tensorflow as tf

from autodist import AutoDist
from autodist.errors import ArgumentError
from autodist.strategies import AllReduce
from keras_fit_models import BATCH, build, close, data

CLASS_WEIGHT = {0: 0.5, 2: 2.0}   # class 1 left out: weight 1


def _distributed(spec):
    keras.backend.clear_session(free_memory=False)
    ad = AutoDist(spec, AllReduce())
    with tf.Graph().as_default(), ad.scope():
        model = build("dense")
    return ad, model


def _single():
    keras.backend.clear_session(free_memory=False)
    return build("dense")


def _trained(model, ad=None):
    if ad is None:
        return [w.numpy() for w in model.trainable_weights]
    return ad.session.run([w.value for w in model.weights if w.trainable])


def _same_weights(actual, expected):
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


class Rows(keras.utils.PyDataset):
    """The dense data in batches of BATCH rows, optionally with its epochs counted."""

    def __init__(self, x, y, **kwargs):
        super().__init__(**kwargs)
        self.x, self.y, self.epochs_begun = x, y, 0

    def __len__(self):
        return -(-len(self.x) // BATCH)

    def __getitem__(self, index):
        rows = slice(index * BATCH, (index + 1) * BATCH)
        return self.x[rows], self.y[rows]

    def on_epoch_begin(self):
        self.epochs_begun += 1


def _calls(model, x, y):
    """The calls both sides make, in order: every data argument of the issue, one after the other."""
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)
    fit = dict(verbose=0, shuffle=False)
    return [
        ("class_weight", lambda: model.fit(x, y, batch_size=BATCH, epochs=2, class_weight=CLASS_WEIGHT,
                                           validation_split=0.2, **fit).history),
        ("steps_per_epoch arrays", lambda: model.fit(x, y, batch_size=BATCH, epochs=3, steps_per_epoch=3,
                                                     class_weight=CLASS_WEIGHT, **fit).history),
        ("steps_per_epoch without batch_size", lambda: model.fit(x, y, epochs=2, steps_per_epoch=5,
                                                                 class_weight=CLASS_WEIGHT, **fit).history),
        ("class_weight dataset", lambda: model.fit(dataset, epochs=2, class_weight=CLASS_WEIGHT,
                                                   validation_data=dataset.take(2), validation_steps=1,
                                                   **fit).history),
        ("steps_per_epoch repeated dataset", lambda: model.fit(dataset.repeat(), epochs=2, steps_per_epoch=3,
                                                               class_weight=CLASS_WEIGHT, **fit).history),
        ("steps_per_epoch short dataset", lambda: model.fit(dataset.take(3), epochs=2, steps_per_epoch=2,
                                                            class_weight=CLASS_WEIGHT, **fit).history),
        ("PyDataset", lambda: model.fit(Rows(x, y), epochs=2, class_weight=CLASS_WEIGHT, **fit).history),
        ("evaluate steps", lambda: model.evaluate(x, y, batch_size=BATCH, steps=2, verbose=0, return_dict=True)),
        ("evaluate sample_weight", lambda: model.evaluate(x, y, batch_size=BATCH, verbose=0, return_dict=True,
                                                          sample_weight=np.linspace(0.5, 1.5, len(x)))),
        ("evaluate PyDataset", lambda: model.evaluate(Rows(x, y), verbose=0, return_dict=True)),
        ("predict steps", lambda: model.predict(x, batch_size=BATCH, steps=2, verbose=0)),
    ]


def test_class_weight_steps_and_pydatasets_equal_single_device_keras(spec):
    x, y = data("dense")
    single = _single()
    expected = [(name, call()) for name, call in _calls(single, x, y)]
    expected_weights = _trained(single)

    ad, model = _distributed(spec)
    for (name, call), (_, want) in zip(_calls(model, x, y), expected):
        got = call()
        if isinstance(want, dict):
            close(got, want)
        else:
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=name)
        if name == "steps_per_epoch arrays":
            assert len(got["loss"]) == 3
    _same_weights(_trained(model, ad), expected_weights)


def test_fit_after_evaluate_with_sample_weights_and_the_reverse(spec):
    """evaluate(sample_weight=) after a fit without weights works (it named 'train_step' before, item 5); a fit
    whose sample weights differ from the traced training step's is refused, naming the arguments."""
    x, y = data("dense")
    weights = np.linspace(0.5, 1.5, len(x)).astype(np.float32)
    single = _single()
    single.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    expected = single.evaluate(x, y, batch_size=BATCH, sample_weight=weights, verbose=0, return_dict=True)

    ad, model = _distributed(spec)
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    close(model.evaluate(x, y, batch_size=BATCH, sample_weight=weights, verbose=0, return_dict=True), expected)
    with pytest.raises(ArgumentError) as refused:
        model.fit(x, y, batch_size=BATCH, class_weight=CLASS_WEIGHT, verbose=0)
    assert str(refused.value).startswith("model.fit(sample_weight=... or class_weight=...): this model's training "
                                         "step was traced without sample weights by its first fit")


def _refusals(x, y):
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)
    return [
        ("validation_split dataset", dict(x=dataset, validation_split=0.2), "validation_split"),
        ("validation_split too small", dict(x=x[:1], y=y[:1], validation_split=0.2), "validation_split"),
        ("y with a dataset", dict(x=dataset, y=y), "y"),
        ("class_weight and sample_weight", dict(x=x, y=y, class_weight=CLASS_WEIGHT, sample_weight=np.ones(len(x))),
         "class_weight"),
        ("rows differ", dict(x=x, y=y[:-1]), "cardinality"),
    ]


def test_what_keras_refuses_is_refused_with_its_meaning(spec):
    """Keras raises ValueError on one device; autodist raises ArgumentError (a ValueError) naming the argument,
    before anything is traced (validation_split on a dataset used to be ignored silently, item 3)."""
    x, y = data("dense")
    single = _single()
    ad, model = _distributed(spec)
    for name, arguments, keras_says in _refusals(x, y):
        with pytest.raises(ValueError) as theirs:
            single.fit(epochs=1, verbose=0, **arguments)
        assert keras_says in str(theirs.value), name
        with pytest.raises(ArgumentError) as ours:
            model.fit(epochs=1, verbose=0, **arguments)
        assert isinstance(ours.value, ValueError)
        wanted = {"validation_split dataset": "fit(validation_split=0.2): validation_split is only supported for "
                                              "arrays (NumPy arrays or tensors), as in Keras; x is a",
                  "validation_split too small": "the training data has 1 row(s), too few to split",
                  "y with a dataset": "fit(y=...): when x is a",
                  "class_weight and sample_weight": "give one of them, not both",
                  "rows differ": "must hold the same number of rows"}[name]
        assert wanted in str(ours.value), (name, str(ours.value))
    assert ad.session is None, "nothing was traced or launched"


def test_a_python_generator_is_refused_naming_x(spec):
    x, y = data("dense")
    ad, model = _distributed(spec)

    def batches():
        for start in range(0, len(x), BATCH):
            yield x[start:start + BATCH], y[start:start + BATCH]
    for call in (lambda: model.fit(batches(), epochs=1, verbose=0), lambda: model.evaluate(batches(), verbose=0),
                 lambda: model.predict(iter([x]), verbose=0)):
        with pytest.raises(ArgumentError, match=r"\(x=<(generator|list_iterator)>\): autodist takes arrays, a "
                                                r"tf.data.Dataset or a keras.utils.PyDataset"):
            call()


def test_an_endless_dataset_needs_steps(spec):
    x, y = data("dense")
    ad, model = _distributed(spec)
    with pytest.raises(ArgumentError, match=r"fit\(\): the data never ends .*give steps_per_epoch"):
        model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH).repeat(), verbose=0)


def test_a_pydatasets_epoch_hooks_run_every_epoch(spec):
    x, y = data("dense")
    rows = Rows(x, y)
    ad, model = _distributed(spec)
    model.fit(rows, epochs=3, shuffle=False, verbose=0)
    assert rows.epochs_begun == 3


def test_a_dataset_class_beyond_class_weight_is_refused_as_keras_refuses_it(spec):
    x, y = data("dense")
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)
    with pytest.raises(tf.errors.InvalidArgumentError):   # one device: tf.gather out of range
        _single().fit(dataset, class_weight={0: 1.0, 1: 2.0}, verbose=0)
    ad, model = _distributed(spec)
    with pytest.raises(ArgumentError, match=r"class_weight has no weight for class 2 of the data \(its classes go "
                                            r"up to 1\)"):
        model.fit(dataset, class_weight={0: 1.0, 1: 2.0}, verbose=0)

"""The global batches of a distributed ``fit`` / ``evaluate`` / ``predict``, dealt as Keras deals them on one device.

    data = Batches.of("fit", x, y, sample_weight, batch_size, shuffle, class_weight, steps_per_epoch)
    for batch in data.epoch(epoch): ...     # (x, y, sample_weight) as numpy nests: one global batch

What ``x`` may be, as on one device; what Keras refuses is refused here too,
as ``ArgumentError`` (a ``ValueError``, as Keras' own) with Keras' meaning:

    arrays            numpy arrays or tensors, or nests of them, all of one length: cut into
                      global batches of ``batch_size`` (32, or the rows over ``steps`` rounded up
                      when only ``steps`` is given), the last one partial; ``shuffle`` permutes
                      the rows at every pass with a seed every node shares (not Keras' draw)
    tf.data.Dataset   its elements are the global batches, ``y`` and sample weights inside
                      them; iterated eagerly
    keras.utils.PyDataset
                      its batches ``x[0] ... x[n - 1]`` (``num_batches`` None: endless), read
                      here in turn (``workers`` only prefetch: the batches are the same);
                      ``shuffle`` permutes their order at every pass with the shared seed; its
                      ``on_epoch_begin`` / ``on_epoch_end`` run every epoch, as under Keras
    anything else     refused, a Python generator or iterator too: it can be read once, and
                      each node's own copy would have to yield the same batches; a
                      tf.data.Dataset (``from_generator``) or a PyDataset say how to read it again

``class_weight`` gives each row the weight of its class in ``y`` (the argmax
of a one-hot row, else the rounded label; 1 for classes it leaves out), as
Keras makes it; not with sample weights, not for several outputs.

``steps`` (``steps_per_epoch``; ``evaluate``'s and ``predict``'s ``steps``)
deals as Keras' ``EpochIterator``: an epoch takes ``steps`` batches from an
iterator that carries on into the next epoch, and starts again once it has
given all the data's batches; an epoch whose data runs out ends early, with
Keras' warning. Without ``steps`` every epoch is one whole pass over the data
(an endless dataset needs ``steps``).
"""
import itertools
import math
import types
import warnings

import numpy as np
import tensorflow as tf

from autodist.errors import ArgumentError

__all__ = ["Batches", "validation_split", "unpack", "take", "num_rows", "SHUFFLE_SEED"]

SHUFFLE_SEED = 1234   # every node draws the same permutation of the same pass
_RAN_OUT = ("Your input ran out of data; interrupting training. Make sure that your dataset or generator can "
            "generate at least `steps_per_epoch * epochs` batches. You may need to use the `.repeat()` function "
            "when building your dataset.")


def take(nest, index):
    return tf.nest.map_structure(lambda a: None if a is None else np.asarray(a)[index], nest)


def num_rows(x):
    return len(tf.nest.flatten(x)[0])


def unpack(element):
    """(x, y, sample_weight) of a dataset element or a PyDataset batch, as Keras reads one."""
    if isinstance(element, list):
        element = tuple(element)
    if isinstance(element, tuple):
        return tuple(element) + (None,) * (3 - len(element))
    return element, None, None


def _is_arrays(nest):
    """Whether every leaf of ``nest`` is an array Keras slices (a list of plain numbers is not one, in Keras)."""
    return all(a is None or isinstance(a, (np.ndarray, tf.Tensor)) or hasattr(a, "__array__")
               for a in tf.nest.flatten(nest))


def _class_weights(what, y, class_weight, within_keys=False):
    """One weight per row of ``y``: its class's in ``class_weight``, 1.0 for the classes it leaves out.

    ``within_keys``: a class above the largest key is refused, as Keras refuses
    it for a tf.data.Dataset (it gathers from a table of the keys' range).
    """
    if y is None or len(tf.nest.flatten(y)) != 1:
        raise ArgumentError("{}(class_weight=...): class_weight is only supported for models with a single output, "
                            "as in Keras; give per-row sample weights instead".format(what))
    labels = np.asarray(tf.nest.flatten(y)[0])
    if labels.ndim > 1:
        labels = np.argmax(labels, axis=-1) if labels.shape[-1] != 1 else np.squeeze(labels, axis=-1)
    classes = np.round(labels).astype(np.int32)
    if within_keys and classes.size and classes.max() > max(class_weight):
        raise ArgumentError("{}(class_weight=...): class_weight has no weight for class {} of the data (its classes "
                            "go up to {}); Keras refuses that for a tf.data.Dataset too".format(
                                what, classes.max(), max(class_weight)))
    import keras
    return np.array([class_weight.get(int(c), 1.0) for c in classes], dtype=keras.backend.floatx())


def validation_split(x, y, sample_weight, split):
    """``((x, y, sample_weight) to train on, the same of the last rows to validate on)``, as Keras splits."""
    if not _is_arrays((x, y, sample_weight)) or isinstance(x, tf.data.Dataset):
        raise ArgumentError("fit(validation_split={}): validation_split is only supported for arrays (NumPy arrays or "
                            "tensors), as in Keras; x is a {}. Give validation_data=... instead".format(
                                split, type(x).__name__))
    rows = num_rows(x)
    cut = int(math.floor(rows * (1.0 - split)))
    if cut in (0, rows):
        raise ArgumentError("fit(validation_split={}): the training data has {} row(s), too few to split into a "
                            "validation and a training set, as in Keras. Give more data or another "
                            "validation_split".format(split, rows))
    head, tail = np.arange(cut), np.arange(cut, rows)
    return (take(x, head), take(y, head), take(sample_weight, head)), (take(x, tail), take(y, tail),
                                                                      take(sample_weight, tail))


class _Arrays:
    def __init__(self, what, x, y, sample_weight, batch_size, shuffle, steps):
        lengths = {len(a) for a in tf.nest.flatten((x, y, sample_weight)) if a is not None and np.ndim(a) > 0}
        if len(lengths) > 1 or any(np.ndim(a) == 0 for a in tf.nest.flatten(x)):
            raise ArgumentError("{}(): x, y and sample_weight must hold the same number of rows, as in Keras; got "
                                "lengths {}".format(what, sorted(lengths)))
        self.data, self.rows = (x, y, sample_weight), num_rows(x)
        self.batch_size = batch_size or (int(math.ceil(self.rows / steps)) if steps else 32)
        self.count = int(math.ceil(self.rows / self.batch_size))
        self.shuffle = bool(shuffle)

    def batches(self, number):
        order = np.random.RandomState(SHUFFLE_SEED + number).permutation(self.rows) if self.shuffle \
            else np.arange(self.rows)
        for start in range(0, self.rows, self.batch_size):
            yield take(self.data, order[start:start + self.batch_size])

    def begin(self):
        pass

    end = begin


class _Dataset:
    def __init__(self, what, dataset, class_weight):
        if not tf.executing_eagerly():
            raise ArgumentError("{}(dataset) iterates the dataset eagerly: call it outside the "
                                "`with tf.Graph().as_default()` block".format(what))
        self.dataset, self.class_weight, self.what = dataset, class_weight, what
        count = int(dataset.cardinality())
        self.count = count if count >= 0 else None
        self.endless = count == tf.data.INFINITE_CARDINALITY

    def batches(self, number):
        for element in self.dataset.as_numpy_iterator():
            yield _weighted(self.what, unpack(element), self.class_weight, within_keys=True)

    def begin(self):
        pass

    end = begin


class _PyDataset:
    def __init__(self, what, data, class_weight, shuffle):
        self.data, self.class_weight, self.shuffle, self.what = data, class_weight, bool(shuffle), what
        self.count = data.num_batches
        self.endless = self.count is None

    def batches(self, number):
        if self.count is None:
            indices = itertools.count()   # an endless PyDataset
        elif self.shuffle:
            indices = np.random.RandomState(SHUFFLE_SEED + number).permutation(self.count)
        else:
            indices = range(self.count)
        for index in indices:
            batch = self.data[int(index)]
            if not isinstance(batch, (tuple, list, dict, np.ndarray)) or (
                    isinstance(batch, (tuple, list)) and len(batch) not in (1, 2, 3)):
                raise ArgumentError("{}(): PyDataset.__getitem__() must return (inputs,), (inputs, targets) or "
                                    "(inputs, targets, sample_weights), or a dict, as in Keras; got {}".format(
                                        self.what, type(batch).__name__))
            yield _weighted(self.what, unpack(batch if not isinstance(batch, np.ndarray) else (batch,)),
                            self.class_weight)

    def begin(self):
        self.data.on_epoch_begin()

    def end(self):
        self.data.on_epoch_end()


def _weighted(what, batch, class_weight, within_keys=False):
    x, y, sample_weight = batch
    if class_weight is None:
        return batch
    if sample_weight is not None:
        raise ArgumentError("{}(class_weight=...): the data holds sample weights too; as in Keras, give one of "
                            "class_weight and sample weights, not both".format(what))
    return x, y, _class_weights(what, y, class_weight, within_keys)


def _source(what, x, y, sample_weight, batch_size, shuffle, class_weight, steps):
    """The source of ``x`` (see the module docstring); Keras' refusals as ``ArgumentError``."""
    import keras
    if x is None:
        raise ArgumentError("{}() needs data: x (and y) arrays, a tf.data.Dataset or a keras.utils.PyDataset".format(
            what))
    packed = isinstance(x, (tf.data.Dataset, keras.utils.PyDataset))
    if packed:
        for name, value in (("y", y), ("sample_weight", sample_weight)):
            if value is not None:
                raise ArgumentError("{}({}=...): when x is a {}, {} should not be passed, as in Keras: it belongs "
                                    "in the data's own elements".format(what, name, type(x).__name__, name))
    if isinstance(x, tf.data.Dataset):
        return _Dataset(what, x, class_weight)
    if isinstance(x, keras.utils.PyDataset):
        return _PyDataset(what, x, class_weight, shuffle)
    if isinstance(x, (types.GeneratorType, map, filter, zip)) or (hasattr(x, "__next__") and not _is_arrays(x)) \
            or not _is_arrays((x, y, sample_weight)):
        raise ArgumentError(
            "{}(x=<{}>): autodist takes arrays, a tf.data.Dataset or a keras.utils.PyDataset. A Python generator or "
            "iterator can be read once, and every node's own copy would have to yield the same global batches; "
            "wrap it as tf.data.Dataset.from_generator(make_generator, output_signature=...) or a "
            "keras.utils.PyDataset".format(what, type(x).__name__))
    if class_weight is not None:
        if sample_weight is not None:
            raise ArgumentError("{}(class_weight=..., sample_weight=...): give one of them, not both, as in "
                                "Keras".format(what))
        sample_weight = _class_weights(what, y, class_weight)
    return _Arrays(what, x, y, sample_weight, batch_size, shuffle, steps)


class Batches:
    """The global batches of each epoch of one call (see the module docstring)."""

    def __init__(self, source, steps, what):
        self._source, self.steps_given, self._what = source, steps, what
        self._count = source.count        # the data's batches, once known
        self._iterator = None             # with steps: the iterator that carries on into the next epoch
        self._seen = 0
        self._passes = 0

    @classmethod
    def of(cls, what, x, y=None, sample_weight=None, batch_size=None, shuffle=False, class_weight=None, steps=None):
        if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
            raise ArgumentError("{}(steps{}={!r}): expected a whole number >= 1 or None".format(
                what, "_per_epoch" if what == "fit" else "", steps))
        source = _source(what, x, y, sample_weight, batch_size, shuffle, class_weight, steps)
        if getattr(source, "endless", False) and steps is None:
            raise ArgumentError("{}(): the data never ends (an endless {}): give steps{} as well, as its epochs "
                                "would never end under Keras either".format(
                                    what, type(x).__name__, "_per_epoch" if what == "fit" else ""))
        return cls(source, steps, what)

    @property
    def batch_size(self):
        """The global batch of arrays (None for a dataset or a PyDataset: its elements are the batches)."""
        return getattr(self._source, "batch_size", None)

    def steps(self):
        """The batches of an epoch for the callbacks' progress: ``steps`` if given, else the data's (or None)."""
        return self.steps_given or self._count

    def example(self):
        """The first global batch, to trace the steps with (the epochs' dealing is left as it is)."""
        for batch in self._source.batches(0):
            return batch
        raise ArgumentError("{}(): the data holds no batch".format(self._what))

    def _fresh(self):
        self._passes += 1
        return iter(self._source.batches(self._passes - 1))

    def epoch(self, epoch):
        """The batches of epoch ``epoch`` (the source's epoch hooks around them)."""
        self._source.begin()
        try:
            if self.steps_given is None:
                yield from self._fresh()
            else:
                yield from self._dealt()
        finally:
            self._source.end()

    def _dealt(self):
        if self._iterator is None:
            self._iterator, self._seen = self._fresh(), 0
        for _ in range(self.steps_given):
            if self._count and self._seen >= self._count:
                warnings.warn(_RAN_OUT, stacklevel=2)
                break
            self._seen += 1
            try:
                batch = next(self._iterator)
            except StopIteration:
                if self._count is None:
                    self._count = self._seen
                warnings.warn(_RAN_OUT, stacklevel=2)
                self._iterator = None
                return
            yield batch
        if self._count and self._seen >= self._count:
            self._iterator, self._seen = self._fresh(), 0

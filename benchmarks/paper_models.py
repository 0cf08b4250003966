"""The six model families of AutoDist's published table, scaled down to run on CPUs, variable structure kept.

    from paper_models import FAMILIES
    logits = FAMILIES["resnet101"].net(GraphNet(tf), x)      # in a tf1 graph: tf1.get_variable
    net = EagerNet(tf); FAMILIES["bert"].net(net, x)           # eagerly (MultiWorkerMirroredStrategy)

Each family is written once, against a small ``Net`` (variables and layers),
and built two ways: in a tf1 graph (autodist, the hand-written parameter
server, one device) and eagerly with ``tf.Variable`` made on the first call
(MultiWorkerMirroredStrategy, under its scope). What is kept of each family
is what decides a synchronization plan, its variables:

    family        variables  of them                               what the plan sees
    resnet101     314        104 convolutions without bias,        many small tensors
                             104 batch norms (gamma, beta), fc
    densenet121   364        120 convolutions, 121 batch norms, fc many small tensors
    inception3    190        94 convolutions, 94 batch-norm betas  many small tensors
                             (no scale, as Keras'), fc
    vgg16         32         13 convolutions, 3 fully connected    a few huge dense ones (fc1 3/4 of it)
                             (with bias)
    bert          393        30522 x H word table (sparse), 24     a huge sparse embedding + dense layers
                             layers of 16 (q, k, v, o, 2 layer
                             norms, 2 feed-forward), pooler, head
    ncf           12         4 tables (138493 users, 26744 items:  huge sparse embeddings, a small MLP
                             MF and MLP), 3 + 1 dense layers
    resnet50      161        53 convolutions without bias, 53      many small tensors, 94 MB in all
                             batch norms, fc: at full width

``resnet50`` is not one of the paper's table: it is the issue's ResNet50
(``keras.applications.ResNet50`` on 32 x 32 images, 10 classes, 23.5M
parameters against Keras' 23.6M with its convolutions' biases), at full
width, for the bound of a step on two hosts of unshaped links.

and what is scaled: images are 32 x 32 (10 classes), sequences 16 tokens,
and widths shrink (channels / 4, VGG's / 8 with fully connected layers of
512, BERT's hidden size 1024 -> 128, NCF's factors / 4) so a step runs in
tens of milliseconds on one core. Spatial sizes follow: Inception uses
'same' padding throughout (its 'valid' stem needs 75 x 75), VGG pools after
its first two blocks and once more (2 x 2, stride 1) to 7 x 7 before fc1, so
fc1 keeps its share of the model. Batch norm normalizes by the batch's
moments and trains gamma and beta; its moving averages, which no plan
synchronizes, are left out. Row counts of the tables are kept: a step
touches as few of them as the paper's did.

``PAPER`` holds each family as the paper ran it (AutoDist's cluster B: 4
NVIDIA T4 per node, 50 Gbit/s), from which ``paper_table.py`` derives link
rates: parameters, forward multiply-adds per example, the batch per GPU, and
the sparse rows a GPU's step touches. Nothing here imports TensorFlow at
import time.
"""
import contextlib
import dataclasses
import functools
import math

import numpy as np

from step_time_models import Model

__all__ = ["FAMILIES", "PAPER", "Paper", "GraphNet", "EagerNet", "family_counts"]


@dataclasses.dataclass(frozen=True)
class Paper:
    """One family as the paper's cluster ran it (full size)."""

    title: str
    params: float          # trainable parameters
    dense_params: float    # of them, those with a dense gradient
    macs: float            # forward multiply-adds per example
    batch: int             # per GPU
    sparse_rows: float     # rows of the sparse tables one GPU's step touches (each of ``row_params`` floats)
    row_params: int = 0


#: Full-size figures (original papers; BERT-large: 6 x parameters x tokens per training example counts
#: forward and backward, given here as forward multiply-adds: params x 128 tokens).
PAPER = {
    "resnet101": Paper("ResNet-101", 44.5e6, 44.5e6, 7.8e9, 64, 0),
    "resnet50": Paper("ResNet-50", 25.6e6, 25.6e6, 4.1e9, 64, 0),
    "densenet121": Paper("DenseNet-121", 8.0e6, 8.0e6, 2.9e9, 64, 0),
    "inception3": Paper("InceptionV3", 23.8e6, 23.8e6, 5.7e9, 64, 0),
    "vgg16": Paper("VGG16", 138.4e6, 138.4e6, 15.5e9, 64, 0),
    "bert": Paper("BERT-large", 335e6, 304e6, 335e6 * 128, 8, 8 * 128, 1024),
    "ncf": Paper("NCF", 31.8e6, 0.2e6, 0.2e6, 8192, 2 * 2 * 8192, 96),
}


class _Net:
    """Layers on variables made by ``variable`` (a subclass decides how); names nest by ``scope``."""

    def __init__(self, tf):
        self.tf = tf
        self._path = []

    @contextlib.contextmanager
    def scope(self, name):
        self._path.append(name)
        try:
            yield
        finally:
            self._path.pop()

    def _name(self, name):
        return "/".join(self._path + [name])

    def _initial(self, kind, shape):
        tf = self.tf
        tf1 = tf.compat.v1
        return {"glorot": tf1.glorot_uniform_initializer(), "zeros": tf1.zeros_initializer(),
                "ones": tf1.ones_initializer(), "normal": tf1.truncated_normal_initializer(stddev=0.02),
                "uniform": tf1.random_uniform_initializer(-0.05, 0.05)}[kind]

    def conv(self, x, filters, size, stride=1, bias=False, name="conv"):
        """A convolution, 'same' padding; ``size``: an int or (height, width)."""
        tf = self.tf
        kh, kw = (size, size) if isinstance(size, int) else size
        kernel = self.variable(name + "/kernel", [kh, kw, x.shape[-1], filters], "glorot")
        y = tf.nn.conv2d(x, kernel, stride, "SAME")
        return y + self.variable(name + "/bias", [filters], "zeros") if bias else y

    def bn(self, x, scale=True, name="bn"):
        """Batch norm on the batch's moments (training), gamma and beta trained; ``scale=False``: beta only."""
        tf = self.tf
        mean, variance = tf.nn.moments(x, list(range(len(x.shape) - 1)), keepdims=True)
        channels = x.shape[-1]
        gamma = self.variable(name + "/gamma", [channels], "ones") if scale else None
        beta = self.variable(name + "/beta", [channels], "zeros")
        return tf.nn.batch_normalization(x, mean, variance, beta, gamma, 1e-3)

    def conv_bn(self, x, filters, size, stride=1, relu=True, scale=True, name="conv"):
        with self.scope(name):
            y = self.bn(self.conv(x, filters, size, stride), scale=scale)
        return self.tf.nn.relu(y) if relu else y

    def dense(self, x, units, activation=None, name="dense"):
        tf = self.tf
        kernel = self.variable(name + "/kernel", [x.shape[-1], units], "glorot")
        flat = tf.reshape(x, [-1, x.shape[-1]]) if len(x.shape) > 2 else x
        y = tf.matmul(flat, kernel) + self.variable(name + "/bias", [units], "zeros")
        if len(x.shape) > 2:
            y = tf.reshape(y, tf.concat([tf.shape(x)[:-1], [units]], 0))
        return y if activation is None else getattr(tf.nn, activation)(y)

    def embed(self, ids, rows, dim, name="embedding", initial="normal"):
        """Rows of a table by id: only the looked-up rows are read, the gradient is IndexedSlices."""
        return self.tf.nn.embedding_lookup(self.variable(name, [rows, dim], initial), ids)

    def layer_norm(self, x, name="ln"):
        tf = self.tf
        mean, variance = tf.nn.moments(x, [-1], keepdims=True)
        gamma = self.variable(name + "/gamma", [x.shape[-1]], "ones")
        beta = self.variable(name + "/beta", [x.shape[-1]], "zeros")
        return (x - mean) * tf.math.rsqrt(variance + 1e-12) * gamma + beta


class GraphNet(_Net):
    """Variables by ``tf.compat.v1.get_variable`` in the default graph (build it once per graph)."""

    def variable(self, name, shape, initial):
        tf1 = self.tf.compat.v1
        return tf1.get_variable(self._name(name), shape, initializer=self._initial(initial, shape))


class EagerNet(_Net):
    """``tf.Variable`` made on the first call (under a strategy's scope) and reused by every later one."""

    def __init__(self, tf):
        super().__init__(tf)
        self.store = {}

    def variable(self, name, shape, initial):
        full = self._name(name)
        if full not in self.store:
            value = self._initial(initial, shape)(shape, dtype=self.tf.float32)
            self.store[full] = self.tf.Variable(value, name=full.replace("/", "_"))
        return self.store[full]


def _pool(tf, x, size, stride, kind="max", padding="SAME"):
    return (tf.nn.max_pool2d if kind == "max" else tf.nn.avg_pool2d)(x, size, stride, padding)


def resnet101(net, x, width=16, classes=10):
    """ResNet-101 v1.5: bottleneck blocks (3, 4, 23, 3), stride on the 3 x 3, a projection first in a stage."""
    return _resnet(net, x, (3, 4, 23, 3), width, classes)


def resnet50(net, x, width=64, classes=10):
    """ResNet-50 v1.5 at full width, as ``keras.applications.ResNet50`` on 32 x 32 images: blocks (3, 4, 6, 3)."""
    return _resnet(net, x, (3, 4, 6, 3), width, classes)


def _resnet(net, x, stages, width, classes):
    tf = net.tf
    h = _pool(tf, net.conv_bn(x, width, 7, 2, name="conv1"), 3, 2)
    for stage, (blocks, w) in enumerate(zip(stages, (width, 2 * width, 4 * width, 8 * width)), start=2):
        for block in range(blocks):
            stride = 2 if block == 0 and stage > 2 else 1
            with net.scope("stage{}/block{}".format(stage, block)):
                shortcut = net.conv_bn(h, 4 * w, 1, stride, relu=False, name="project") if block == 0 else h
                r = net.conv_bn(h, w, 1, name="a")
                r = net.conv_bn(r, w, 3, stride, name="b")
                r = net.conv_bn(r, 4 * w, 1, relu=False, name="c")
            h = tf.nn.relu(r + shortcut)
    return net.dense(tf.reduce_mean(h, [1, 2]), classes, name="fc")


def densenet121(net, x, growth=8, classes=10):
    """DenseNet-121: dense blocks (6, 12, 24, 16) of BN-ReLU-1x1 (4k)-BN-ReLU-3x3 (k), halving transitions."""
    tf = net.tf

    def bn_relu_conv(h, filters, size, name):
        with net.scope(name):
            return net.conv(tf.nn.relu(net.bn(h)), filters, size)

    h = _pool(tf, net.conv_bn(x, 2 * growth, 7, 2, name="conv0"), 3, 2)
    for index, layers in enumerate((6, 12, 24, 16), start=1):
        for layer in range(layers):
            with net.scope("block{}/layer{}".format(index, layer)):
                y = bn_relu_conv(bn_relu_conv(h, 4 * growth, 1, "a"), growth, 3, "b")
            h = tf.concat([h, y], -1)
        if index < 4:
            h = _pool(tf, bn_relu_conv(h, int(h.shape[-1]) // 2, 1, "transition{}".format(index)), 2, 2, "avg")
    with net.scope("final"):
        h = tf.nn.relu(net.bn(h))
    return net.dense(tf.reduce_mean(h, [1, 2]), classes, name="fc")


def inception3(net, x, width=4, classes=10):
    """InceptionV3 (Keras' layers: 94 convolutions, batch norm without scale), channels / ``width``."""
    tf = net.tf
    counter = iter(range(1000))

    def cb(h, filters, size, stride=1):
        return net.conv_bn(h, max(1, filters // width), size, stride, scale=False, name="conv{}".format(next(counter)))

    def avg(h):
        return _pool(tf, h, 3, 1, "avg")

    h = cb(cb(cb(x, 32, 3, 2), 32, 3), 64, 3)
    h = _pool(tf, h, 3, 2)
    h = _pool(tf, cb(cb(h, 80, 1), 192, 3), 3, 2)
    for pool in (32, 64, 64):                                          # mixed 0-2
        h = tf.concat([cb(h, 64, 1), cb(cb(h, 48, 1), 64, 5), cb(cb(cb(h, 64, 1), 96, 3), 96, 3),
                       cb(avg(h), pool, 1)], -1)
    h = tf.concat([cb(h, 384, 3, 2), cb(cb(cb(h, 64, 1), 96, 3), 96, 3, 2), _pool(tf, h, 3, 2)], -1)   # mixed 3
    for c in (128, 160, 160, 192):                                     # mixed 4-7
        seven = cb(cb(cb(h, c, 1), c, (1, 7)), 192, (7, 1))
        double = cb(cb(cb(cb(cb(h, c, 1), c, (7, 1)), c, (1, 7)), c, (7, 1)), 192, (1, 7))
        h = tf.concat([cb(h, 192, 1), seven, double, cb(avg(h), 192, 1)], -1)
    h = tf.concat([cb(cb(h, 192, 1), 320, 3, 2), cb(cb(cb(cb(h, 192, 1), 192, (1, 7)), 192, (7, 1)), 192, 3, 2),
                   _pool(tf, h, 3, 2)], -1)                            # mixed 8
    for _ in range(2):                                                 # mixed 9-10
        three = cb(h, 384, 1)
        three = tf.concat([cb(three, 384, (1, 3)), cb(three, 384, (3, 1))], -1)
        double = cb(cb(h, 448, 1), 384, 3)
        double = tf.concat([cb(double, 384, (1, 3)), cb(double, 384, (3, 1))], -1)
        h = tf.concat([cb(h, 320, 1), three, double, cb(avg(h), 192, 1)], -1)
    return net.dense(tf.reduce_mean(h, [1, 2]), classes, name="fc")


def vgg16(net, x, width=8, fc=512, classes=10):
    """VGG16: 13 convolutions (with bias) in 5 blocks, 3 fully connected; 7 x 7 before fc1 (module docstring)."""
    tf = net.tf
    h = x
    for index, (convs, channels) in enumerate(zip((2, 2, 3, 3, 3), (64, 128, 256, 512, 512)), start=1):
        for conv in range(convs):
            h = tf.nn.relu(net.conv(h, channels // width, 3, bias=True, name="block{}/conv{}".format(index, conv)))
        if index <= 2:
            h = _pool(tf, h, 2, 2)
    h = _pool(tf, h, 2, 1, padding="VALID")                 # 8 x 8 -> 7 x 7, as VGG's 224 x 224 ends
    h = tf.reshape(h, [-1, math.prod(h.shape[1:])])
    h = net.dense(net.dense(h, fc, "relu", name="fc1"), fc, "relu", name="fc2")
    return net.dense(h, classes, name="fc3")


def bert(net, ids, layers=24, hidden=128, heads=2, ffn=512, vocab=30522, positions=512, classes=2):
    """BERT-large's layers (24 x 16 variables) at ``hidden``; a classification head on the first token."""
    tf = net.tf
    length = ids.shape[1]
    with net.scope("embeddings"):
        h = net.embed(ids, vocab, hidden, name="word")
        h = h + net.variable("position", [positions, hidden], "normal")[:length]
        h = h + net.variable("type", [2, hidden], "normal")[0]
        h = net.layer_norm(h)
    size = hidden // heads

    def split(t):
        return tf.transpose(tf.reshape(t, [-1, length, heads, size]), [0, 2, 1, 3])

    for layer in range(layers):
        with net.scope("layer{}".format(layer)):
            q, k, v = (split(net.dense(h, hidden, name=n)) for n in ("query", "key", "value"))
            weights = tf.nn.softmax(tf.matmul(q, k, transpose_b=True) / math.sqrt(size))
            context = tf.reshape(tf.transpose(tf.matmul(weights, v), [0, 2, 1, 3]), [-1, length, hidden])
            h = net.layer_norm(h + net.dense(context, hidden, name="output"), name="ln1")
            inner = net.dense(h, ffn, "gelu", name="ffn_in")
            h = net.layer_norm(h + net.dense(inner, hidden, name="ffn_out"), name="ln2")
    pooled = net.dense(h[:, 0], hidden, "tanh", name="pooler")
    return net.dense(pooled, classes, name="classifier")


def ncf(net, ids, users=138493, items=26744, factors=16, layers=(64, 64, 32, 16)):
    """NeuMF: matrix factorization and an MLP on their own user and item tables (ids: [user, item])."""
    tf = net.tf
    user, item = ids[:, 0], ids[:, 1] % items
    mf = net.embed(user, users, factors, "mf_user", "uniform") * net.embed(item, items, factors, "mf_item", "uniform")
    half = layers[0] // 2
    h = tf.concat([net.embed(user, users, half, "mlp_user", "uniform"),
                   net.embed(item, items, half, "mlp_item", "uniform")], -1)
    for index, units in enumerate(layers[1:]):
        h = net.dense(h, units, "relu", name="mlp{}".format(index))
    return net.dense(tf.concat([mf, h], -1), 1, name="predict")


#: The families as step-time models (``step_time_models.Model``; ``net`` builds them).
FAMILIES = {m.name: m for m in (
    Model("resnet101", (32, 32, 3), 0, 10, (), 8, 10, net=resnet101),
    Model("resnet50", (32, 32, 3), 0, 10, (), 16, 10, net=resnet50),
    Model("densenet121", (32, 32, 3), 0, 10, (), 8, 10, net=densenet121),
    Model("inception3", (32, 32, 3), 0, 10, (), 8, 10, net=inception3),
    Model("vgg16", (32, 32, 3), 0, 10, (), 16, 10, net=vgg16),
    Model("bert", (16,), 30522, 2, (), 8, 10, net=bert),
    Model("ncf", (2,), 138493, 0, (), 256, 10, net=ncf),
)}


@functools.lru_cache(maxsize=None)
def family_counts(model):
    """``(variables, parameters, dense parameters, sparse floats one replica's step touches at most)`` of a
    family, counted on a graph it builds (TensorFlow is imported here)."""
    import tensorflow as tf
    graph = tf.Graph()
    with graph.as_default():
        dtype = tf.int64 if model.input_ids else tf.float32
        x = tf.compat.v1.placeholder(dtype, (model.batch,) + model.input_shape)
        model.net(GraphNet(tf), x)
        variables = tf.compat.v1.trainable_variables()
        gathers = [op for op in graph.get_operations() if op.type == "ResourceGather"]
        sparse = {op.inputs[0].op.name for op in gathers}
        # at most one row per id looked up, each of the table's width
        sparse_floats = sum(op.inputs[1].shape.num_elements() * op.outputs[0].shape.as_list()[-1] for op in gathers)
    sizes = {v.op.name: int(np.prod(v.shape.as_list())) for v in variables}
    dense = sum(n for name, n in sizes.items() if name not in sparse)
    return len(variables), sum(sizes.values()), dense, sparse_floats


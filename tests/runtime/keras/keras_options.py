"""The Keras 3 optimizer options and optimizers the option table trains, and their single-device references.

Each row names a Keras optimizer (or an option of one) and, optionally, a
mixed-precision policy. ``fit_reference`` / ``loop_reference`` run it on one
device in plain eager Keras (``model.fit``; a loop of ``GradientTape`` +
``optimizer.apply`` on the same batches): the oracle of
``test_optimizer_options.py``. ``BUILDERS`` are every synchronous builder but
Parallax (whose plan of this model is AllReduce's), the partitioning ones set
to split this model's small kernels, so that every per-shard update path is
exercised.
"""
import keras
import numpy as np

from autodist import strategies

ROWS, BATCH, EPOCHS = 48, 12, 2
SCHEDULE = lambda: keras.optimizers.schedules.CosineDecay(0.1, 8, warmup_target=0.2, warmup_steps=3)  # noqa: E731

#: every option of Keras 3's optimizers: name -> (optimizer factory, dtype policy or None, relative tolerance)
OPTIONS = {
    "clipnorm": (lambda: keras.optimizers.Adam(0.05, clipnorm=0.1), None, 1e-5),
    "clipvalue": (lambda: keras.optimizers.Adam(0.05, clipvalue=0.01), None, 1e-5),
    "global_clipnorm": (lambda: keras.optimizers.SGD(0.05, global_clipnorm=0.5), None, 1e-5),
    "weight_decay": (lambda: keras.optimizers.SGD(0.05, weight_decay=0.1), None, 1e-5),
    "AdamW": (lambda: keras.optimizers.AdamW(0.01, weight_decay=0.1), None, 1e-5),
    "use_ema": (lambda: keras.optimizers.SGD(0.05, use_ema=True), None, 1e-5),
    "ema_overwrite_frequency": (lambda: keras.optimizers.SGD(0.05, use_ema=True, ema_momentum=0.5,
                                                              ema_overwrite_frequency=3), None, 1e-5),
    "loss_scale_factor": (lambda: keras.optimizers.SGD(0.05, loss_scale_factor=128.0), None, 1e-5),
    "gradient_accumulation_steps": (lambda: keras.optimizers.Adam(0.05, gradient_accumulation_steps=3), None, 1e-5),
    "schedule": (lambda: keras.optimizers.SGD(SCHEDULE()), None, 1e-5),
    "mixed_float16": (lambda: keras.optimizers.Adam(0.05), "mixed_float16", 2e-3),
    "mixed_bfloat16": (lambda: keras.optimizers.Adam(0.05), "mixed_bfloat16", 2e-2),
}
#: every built-in optimizer (their updates are element-wise or per variable: a parameter-server and an
#: all-reduce builder that both split variables show them)
OPTIMIZERS = {
    "SGD(nesterov)": (lambda: keras.optimizers.SGD(0.05, momentum=0.9, nesterov=True), None, 1e-5),
    "RMSprop(centered)": (lambda: keras.optimizers.RMSprop(0.05, momentum=0.5, centered=True), None, 1e-5),
    "Adam(amsgrad)": (lambda: keras.optimizers.Adam(0.05, amsgrad=True), None, 1e-5),
    "Adadelta": (lambda: keras.optimizers.Adadelta(0.5), None, 1e-5),
    "Adagrad": (lambda: keras.optimizers.Adagrad(0.05), None, 1e-5),
    "Adamax": (lambda: keras.optimizers.Adamax(0.05), None, 1e-5),
    "Adafactor": (lambda: keras.optimizers.Adafactor(0.05), None, 1e-5),
    "Ftrl": (lambda: keras.optimizers.Ftrl(0.05), None, 1e-5),
    "Lamb": (lambda: keras.optimizers.Lamb(0.05), None, 1e-5),
    "Lion": (lambda: keras.optimizers.Lion(0.01), None, 1e-5),
    "Nadam": (lambda: keras.optimizers.Nadam(0.05), None, 1e-5),
    "Muon": (lambda: keras.optimizers.Muon(0.05), None, 1e-5),
    "MultiOptimizer": (lambda: keras.optimizers.MultiOptimizer(keras.optimizers.OptimizerMap(
        keras.optimizers.Adam(0.05), {"head": keras.optimizers.SGD(0.1)})), None, 1e-5),
    "ScheduleFreeAdamW": (lambda: keras.optimizers.ScheduleFreeAdamW(0.05), None, 1e-5),
}
ROWS_BY_NAME = dict(OPTIONS, **OPTIMIZERS)

#: The options that live inside the optimizer's own update (clipping, weight decay, EMA, the loss scale factor,
#: schedules): under builders of one kind they take the same update path, so one builder of each kind runs them,
#: the partitioned kind through both of its synchronizers (``ONE_PER_KIND``). The others (mixed precision, Keras'
#: own accumulation) change what is synchronized and run under every builder.
INTERNAL = ("clipnorm", "clipvalue", "global_clipnorm", "weight_decay", "AdamW", "use_ema", "ema_overwrite_frequency",
            "loss_scale_factor", "schedule")

#: (option, builder kind) -> (error type name, message fragment): refused, naming what is not supported.
REFUSED = {("ScheduleFreeAdamW", kind): ("CaptureError", "ScheduleFreeAdamW is not supported")
           for kind in ("ps", "ar", "partitioned")}
REFUSED.update({("Adafactor", "partitioned"): ("TransformError", "factored moments")})
SPLITTING = ("PartitionedPS", "RandomAxisPartitionAR")


def _small(builder):
    """A partitioning builder that splits this model's kernels (the defaults leave anything below 256 KiB whole)."""
    size = {"min_shard_bytes": 16} if hasattr(builder, "min_shard_bytes") else {"shard_bytes": 16}
    return type(builder.__name__, (builder,), dict(size, __module__=builder.__module__))


#: builder name -> (class, kind: "ps", "ar" or "partitioned"). Parallax is not among them: on this model (no
#: sparse gradient) its plan is AllReduce's (tests/dedupe.py).
BUILDERS = {
    "PS": (strategies.PS, "ps"), "PSLoadBalancing": (strategies.PSLoadBalancing, "ps"),
    "PartitionedPS": (_small(strategies.PartitionedPS), "partitioned"),
    "UnevenPartitionedPS": (_small(strategies.UnevenPartitionedPS), "partitioned"),
    "AllReduce": (strategies.AllReduce, "ar"), "PartitionedAR": (_small(strategies.PartitionedAR), "partitioned"),
    "RandomAxisPartitionAR": (_small(strategies.RandomAxisPartitionAR), "partitioned"),
}
#: one builder of each kind (the partitioned one by parameter servers and by all-reduce): the INTERNAL options' columns
ONE_PER_KIND = ("PS", "AllReduce") + SPLITTING


def data():
    rng = np.random.RandomState(0)
    return rng.randn(ROWS, 4).astype(np.float32), rng.randint(0, 3, ROWS).astype(np.int32)


def set_policy(option):
    keras.mixed_precision.set_global_policy(ROWS_BY_NAME[option][1] or "float32")


def model(option):
    """The dense classifier of every row, compiled with the row's optimizer (policy set by ``set_policy``)."""
    keras.utils.set_random_seed(1)
    net = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu", name="hidden"),
                            keras.layers.Dense(3, name="head")])
    net.compile(optimizer=ROWS_BY_NAME[option][0](), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return net


def fit(net):
    x, y = data()
    return net.fit(x, y, batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0).history["loss"]


def fit_reference(option):
    """(losses per epoch, weights) of ``fit`` on one device in eager Keras."""
    keras.backend.clear_session(free_memory=False)
    set_policy(option)
    net = model(option)
    losses = fit(net)
    return losses, [w.numpy() for w in net.trainable_weights]


def step_loss(net, x, y):
    logits = net(x, training=True)
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)(y, logits)


def batches():
    x, y = data()
    return [(x[i:i + BATCH], y[i:i + BATCH]) for i in range(0, ROWS, BATCH)] * EPOCHS


def loop_reference(option):
    """The weights after a custom loop (tape, scaled loss, ``apply``) over ``batches()`` on one device."""
    import tensorflow as tf
    keras.backend.clear_session(free_memory=False)
    set_policy(option)
    net = model(option)
    for x, y in batches():
        with tf.GradientTape() as tape:
            loss = net.optimizer.scale_loss(step_loss(net, x, y))
        net.optimizer.apply(tape.gradient(loss, net.trainable_variables), net.trainable_variables)
    return [w.numpy() for w in net.trainable_weights]

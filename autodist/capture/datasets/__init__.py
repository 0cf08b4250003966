"""``tf.data`` pipelines whose iterators are made inside the scope: automatic sharding, uneven inputs.

    AutoDist(spec, builder, auto_shard="auto", uneven_inputs="join")
    with tf.Graph().as_default(), ad.scope():             # capture_datasets(...) for the scope's length
        it = tf.compat.v1.data.make_one_shot_iterator(ds)  # or make_initializable_iterator, or the dataset's
            ds -> this node's part         (sharding.shard_for_node, auto_shard)
               -> read one element ahead   (uneven.with_lookahead, uneven_inputs)
        x, y = it.get_next()                               # the elements of ds, as without autodist
        ...
        sess = ad.create_distributed_session()             # uneven.attach: the state variable's record

For the scope's length ``DatasetV1._make_one_shot_iterator`` and
``_make_initializable_iterator`` (what ``tf.compat.v1.data.make_*_iterator``
and the dataset methods of those names call) are wrapped; on exit, also after
an exception, they are TensorFlow's again. With both options off nothing is
wrapped. Iterators made otherwise (``Iterator.from_structure``) are not
touched; uneven inputs refuse to train from one (``uneven.attach``).
"""
import contextlib

from autodist.capture.datasets.sharding import AUTO_SHARD_POLICIES, auto_shard_policy, shard_for_node
from autodist.capture.datasets.uneven import (POLICIES, LookaheadIterator, attach, end_of_input, is_end_of_input,
                                              state_variable, with_lookahead)
from autodist.errors import CaptureError

__all__ = ["capture_datasets", "check_uneven_policy", "attach", "is_end_of_input", "end_of_input", "POLICIES",
           "AUTO_SHARD_POLICIES", "auto_shard_policy"]


def check_uneven_policy(policy):
    """``policy`` (None: off) or ``CaptureError`` naming the choices."""
    if policy is not None and policy not in POLICIES:
        raise CaptureError("uneven_inputs must be None (off), {}; got {!r}".format(
            " or ".join(repr(p) for p in POLICIES), policy))
    return policy


def _wrapped(original, uneven, shard, depth):
    def make(dataset, *args, **kwargs):
        import tensorflow as tf
        from tensorflow.python.data.ops.dataset_ops import DatasetV1Adapter
        graph = tf.compat.v1.get_default_graph()
        source = shard(dataset)
        if uneven is None:
            return original(source if source is dataset else DatasetV1Adapter(source), *args, **kwargs)
        inner = original(DatasetV1Adapter(with_lookahead(source, depth)), *args, **kwargs)
        return LookaheadIterator(inner, dataset, state_variable(graph))
    return make


@contextlib.contextmanager
def capture_datasets(uneven=None, auto_shard=None, num_workers=1, worker_index=0, local_replicas=1):
    """Wrap iterator creation for the block (module docstring); always restore it.

    ``local_replicas``: the replicas of this node, which draw that many elements of its iterator a step.
    """
    check_uneven_policy(uneven)
    policy = auto_shard_policy(auto_shard)
    if uneven is None and policy == "off":
        yield
        return
    from tensorflow.python.data.ops.dataset_ops import DatasetV1

    def shard(dataset):
        return shard_for_node(dataset, policy, num_workers, worker_index)

    names = ("_make_one_shot_iterator", "_make_initializable_iterator")
    originals = {name: DatasetV1.__dict__[name] for name in names}
    try:
        for name in names:
            setattr(DatasetV1, name, _wrapped(originals[name], uneven, shard, local_replicas))
        yield
    finally:
        for name in names:
            setattr(DatasetV1, name, originals[name])

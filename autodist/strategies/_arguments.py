"""Checks of builder constructor arguments.

A builder validates its arguments when it is constructed, not when it builds:
``autodist plan --arg staleness=-1`` and ``PS(staleness=-1)`` fail at once, with
a message naming the parameter and what it accepts. The errors are
``StrategyError``, a ``ValueError``, as AutoDist users expect.
"""
from autodist.errors import StrategyError

__all__ = ["check_bool", "check_staleness", "check_chunk_size", "check_bucket_bytes", "check_choice", "check_seed"]


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def check_bool(builder, name, value):
    if not isinstance(value, bool):
        raise StrategyError("{}: {} must be True or False, got {!r}".format(builder, name, value))
    return value


def check_staleness(builder, staleness, sync):
    """``staleness`` is an int >= 0, and a positive one needs ``sync=True``."""
    if not _is_int(staleness) or staleness < 0:
        raise StrategyError("{}: staleness must be an integer >= 0 (0 = fully synchronous), "
                            "got {!r}".format(builder, staleness))
    if staleness > 0 and not sync:
        raise StrategyError("{}: staleness={} bounds how far a synchronous worker may run ahead; "
                            "it needs sync=True (with sync=False updates are fully asynchronous "
                            "and staleness must be 0)".format(builder, staleness))
    return staleness


def check_chunk_size(builder, chunk_size):
    if not _is_int(chunk_size) or chunk_size < 1:
        raise StrategyError("{}: chunk_size must be an integer >= 1 (variables per collective "
                            "group), got {!r}".format(builder, chunk_size))
    return chunk_size


def check_bucket_bytes(builder, bucket_bytes):
    if bucket_bytes is not None and (not _is_int(bucket_bytes) or bucket_bytes < 1):
        raise StrategyError("{}: bucket_bytes must be an integer >= 1 (bytes of gradients fused into one "
                            "collective) or None (no byte bound), got {!r}".format(builder, bucket_bytes))
    return bucket_bytes


def check_choice(builder, name, value, choices):
    if value not in choices:
        raise StrategyError("{}: {} must be one of {}, got {!r}".format(
            builder, name, ", ".join(repr(c) for c in choices), value))
    return value


def check_seed(builder, seed):
    if seed is not None and not _is_int(seed):
        raise StrategyError("{}: seed must be an integer or None, got {!r}".format(builder, seed))
    return seed

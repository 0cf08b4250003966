"""Elastic jobs: nodes that join, nodes that leave, nodes that are preempted (``docs/elastic.md``).

    discovery    the host discovery script: which of the spec's nodes are there now
    membership   the candidates, the nodes of an attempt, hosts set aside with a back-off
    driver       the supervisor: attempts on the nodes available, relaunched when they change
    attempt      an attempt's chief: its nodes, a checkpoint and a stop at a step boundary for a change
    preemption   a member's answer to a preemption notice: tell the chief, keep serving, leave
    protocol     what the supervisor and an attempt tell each other (environment, files, statuses)

``elastic_settings`` checks the options (``autodist run``'s and
``AutoDist(...)``'s) and says whether the job is elastic at all.
"""
from autodist.errors import ArgumentError
from autodist.runtime.elastic.driver import DEFAULT_SETTLE, ElasticSettings, supervise_elastic
from autodist.runtime.elastic.protocol import BATCH_SCALE_ENV, RESIZED, attempt_settings
from autodist.runtime.limits import restart_backoff, seconds, whole

__all__ = ["ElasticSettings", "DEFAULT_SETTLE", "elastic_settings", "supervise_elastic", "attempt_settings", "RESIZED",
           "BATCH_SCALE_ENV", "batch_scale_of", "scaled_batch_size"]


def elastic_settings(spec, elastic=False, discovery_script=None, min_nodes=None, max_nodes=None, interval=5.0,
                     host_backoff=60.0, preemption_signal="SIGTERM", preemption_grace=30.0, max_restarts=0,
                     backoff=2.0, keep_per_replica_batch=False, names=None, settle=DEFAULT_SETTLE):
    """``ElasticSettings`` when the job is elastic (``elastic`` or a discovery script), else None.

    ``names`` maps a setting to the name the user gave it (``--max-nodes``),
    for the ``ArgumentError`` a value out of its range raises.
    """
    name = dict({"min_nodes": "min_nodes", "max_nodes": "max_nodes", "interval": "discovery_interval",
                 "host_backoff": "host_backoff", "preemption_signal": "preemption_signal",
                 "preemption_grace": "preemption_grace", "script": "host_discovery_script",
                 "settle": "discovery_settle"}, **(names or {}))
    if not elastic and discovery_script is None:
        if max_nodes is not None:
            raise ArgumentError("{} limits an elastic job: give {} (or elastic) too".format(
                name["max_nodes"], name["script"]))
        return None
    low, high = _node_range(spec, min_nodes, max_nodes, name)
    signal_name = _signal_name(preemption_signal, name["preemption_signal"])
    return ElasticSettings(discovery_script=discovery_script, min_nodes=low, max_nodes=high,
                           interval=seconds(interval, name["interval"], 0.1), host_backoff=restart_backoff(
                               host_backoff, name["host_backoff"]), preemption_signal=signal_name,
                           preemption_grace=seconds(preemption_grace, name["preemption_grace"], 1.0),
                           max_restarts=whole(max_restarts, "max_restarts", least=0),
                           restart_backoff=restart_backoff(backoff),
                           keep_per_replica_batch=bool(keep_per_replica_batch),
                           settle=seconds(settle, name["settle"], 0.0))


def _node_range(spec, min_nodes, max_nodes, name):
    """``(min_nodes, max_nodes)`` checked against the spec's nodes; max_nodes None: no limit, when the spec's
    node template lets any host the discovery script finds join."""
    count = len(spec.node_specs) if spec.node_template is None else None
    low = 1 if min_nodes is None else whole(min_nodes, name["min_nodes"])
    high = count if max_nodes is None else whole(max_nodes, name["max_nodes"])
    if high is not None and not low <= high <= (high if count is None else count):
        raise ArgumentError("{} {} and {} {}: the job needs 1 <= {} <= {} <= {}".format(
            name["min_nodes"], low, name["max_nodes"], high, name["min_nodes"], name["max_nodes"],
            "{} (the spec's nodes)".format(count) if count is not None else "any number (the spec has a "
            "node_template)"))
    return low, high


def _signal_name(value, name):
    if value is None or str(value).lower() == "none":
        return None
    from autodist.runtime.elastic.preemption import signal_number
    import signal
    try:
        return signal.Signals(signal_number(value)).name
    except ValueError as e:
        raise ArgumentError("{}: {}; or none to leave members' signals alone".format(name, e)) from None


def batch_scale_of(job, environ):
    """Replicas now / replicas of the first attempt when the job keeps the per-replica batch, else 1.0.

    The chief of an attempt computes it (``attempt.ElasticAttempt``); the
    nodes it launches find it in ``BATCH_SCALE_ENV``.
    """
    if job.elastic is not None:
        return job.elastic.scale
    text = (environ or {}).get(BATCH_SCALE_ENV)
    return float(text) if text else 1.0


def scaled_batch_size(what, x, batch_size, scale):
    """Keras ``fit``'s global ``batch_size`` (None: Keras' 32) times ``scale``; ArgumentError when that is not
    whole, or when ``x`` brings its own batches (a dataset), which cannot be scaled."""
    if scale == 1.0:
        return batch_size
    import tensorflow as tf
    if not all(hasattr(a, "shape") or hasattr(a, "__array__") for a in tf.nest.flatten(x)):
        raise ArgumentError("{}: keep_per_replica_batch scales the global batch by the replicas (x {:g} now), but "
                            "this input brings its own batches; pass arrays, or leave keep_per_replica_batch "
                            "off".format(what, scale))
    size = (32 if batch_size is None else batch_size) * scale
    if abs(size - round(size)) > 1e-9:
        raise ArgumentError("{}: keep_per_replica_batch: batch_size {} x {:g} (replicas now / at the first attempt) "
                            "is not a whole number; choose a batch_size that each replica count of the job "
                            "divides".format(what, 32 if batch_size is None else batch_size, scale))
    return int(round(size))

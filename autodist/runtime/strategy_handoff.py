"""What the chief hands every other node of a job: the strategy, the calibration it was planned with, the argv.

``autodist.runtime.job`` decides who builds and who reads; this module is the
hand-off itself, through the job's directory on every node::

    chief    build_strategy(item, spec, builder) -> <workdir>/strategy.pb
             keep_calibration(builder, spec)     -> <workdir>/<JOB_CALIBRATION_FILE> (AutoStrategy)
             write_fingerprint(dir, item)        -> <workdir>/fingerprint.json: the graph it planned for
             script_argv()                       -> ["/abs/train.py", "--epochs", "3"]
    member   load_strategy(context)              <- strategy.pb (waits for it, bounded)
             adopt_calibration(builder, path)    <- the calibration next to it: the chief's plan
             check_fingerprint(path, item, ...)  <- the chief's fingerprint: this process captured the same
                                                    graph, or GraphMismatchError naming the first difference
"""
import json
import os
import sys

from autodist.errors import LaunchError, StrategyError
from autodist.ir.utils import gc_frozen
from autodist.plan.contract import op_name
from autodist.plan.strategy import Strategy, assemble
from autodist.runner.base import wait_until
from autodist.runtime.calibrate.first_probe import calibration_for_planning

__all__ = ["build_strategy", "with_accumulation", "accumulation_of", "load_strategy", "keep_calibration",
           "write_calibration", "adopt_calibration", "shipped_calibration", "calibration_from_dict", "script_argv",
           "write_fingerprint", "check_fingerprint", "FINGERPRINT_FILE"]

FINGERPRINT_FILE = "fingerprint.json"


def build_strategy(graph_item, resource_spec, builder):
    """The builder's strategy, compiled for the cluster."""
    from autodist.strategies import StrategyCompiler
    with gc_frozen():   # the graph's objects outlive the plan: collections skip them
        strategy = builder.build(graph_item, resource_spec)
        return StrategyCompiler(graph_item, resource_spec).compile(strategy)


def with_accumulation(strategy, graph_item, requested):
    """``strategy`` accumulating gradients as the job asks (``requested``: ``AutoDist(accumulation_steps=)``,
    else a Keras optimizer's own ``gradient_accumulation_steps``): a new Strategy (id included) when that
    changes it."""
    steps = accumulation_of(requested, graph_item)
    if steps <= 1:   # builders plan every call
        return strategy
    sparse = {record.target.partition(":")[0] for record in getattr(graph_item, "grad_records", ()) if record.is_sparse}
    return assemble([_read_locally(node, sparse) for node in strategy.node_config], strategy.graph_config.replicas,
                    steps)


def _read_locally(node, sparse):
    """``node`` with a local proxy for every synchronous parameter-server variable (and shard) of it.

    Between two updates a synchronous variable does not change, so the k-1
    micro-steps that only accumulate read the node-local copy, refreshed once
    per update, instead of pulling the weights from the server every call: an
    update then moves what one step without accumulation moves. Asynchronous
    and stale variables keep reading the server (they see the other workers'
    updates between their own), and so do variables with sparse gradients
    (op names in ``sparse``): a step reads only the rows it gathers, where a
    refreshed copy would move the whole table every update.
    """
    node = type(node).FromString(node.SerializeToString())
    if op_name(node.var_name) in sparse:
        return node
    for part in [node] + list(node.part_config):
        if part.WhichOneof("synchronizer") == "PSSynchronizer":
            ps = part.PSSynchronizer
            if ps.sync and ps.staleness == 0:
                ps.local_replication = True
    return node


def accumulation_of(requested, graph_item):
    """Micro-steps per update: ``requested`` (the AutoDist's), else the one a Keras optimizer asks for, else 1."""
    own = getattr(graph_item, "accumulation_steps", None)
    if requested and own and requested != own:
        raise StrategyError("AutoDist(accumulation_steps={}) and the optimizer's gradient_accumulation_steps={} "
                            "disagree; set one of them".format(requested, own))
    return requested or own or 1


def load_strategy(context):
    """A member's strategy: the file the chief wrote (waits for it, bounded)."""
    path = os.path.expanduser(context.strategy_path)  # a path on this node, maybe "~/..."
    if not wait_until(lambda: os.path.exists(path), context.strategy_wait, 0.2):
        raise LaunchError("node {}: the chief's strategy did not appear at {} within {:.0f} s".format(
            context.address, context.strategy_path, context.strategy_wait))
    return Strategy.deserialize(path=path)


def calibration_from_dict(data):
    """The chief's calibration from its plain data (a platform-started job hands it over without a file)."""
    from autodist.strategies.cost.calibration import Calibration
    return Calibration.from_dict(data)


def keep_calibration(builder, resource_spec, may_probe=False):
    """``(builder, calibration)``: the chief's calibration for ``builder`` (None: it plans without one) and
    the builder fixed on it for the job; every node gets the same calibration with the strategy.
    ``may_probe``: the chief launches the job now, and may measure a cluster it has no figures of
    (``calibrate.first_probe.calibration_for_planning``, which the builder calls if it wants figures)."""
    measure = calibration_for_planning if may_probe else None
    calibration = builder.job_calibration(resource_spec, measure=measure)
    if calibration is not None:
        builder = builder.with_calibration(calibration)
    return builder, calibration


def write_calibration(directory, calibration):
    """Write the job's calibration into ``directory`` (next to the strategy); its path."""
    from autodist.strategies.cost.calibration import JOB_CALIBRATION_FILE, write_calibration_file
    return write_calibration_file(os.path.join(directory, JOB_CALIBRATION_FILE), calibration)


def adopt_calibration(builder, strategy_path):
    """``builder`` planning as the chief does: with the calibration shipped next to the strategy, if any."""
    calibration = shipped_calibration(strategy_path)
    return builder if calibration is None else builder.with_calibration(calibration)


def shipped_calibration(strategy_path):
    """The calibration the chief shipped next to the strategy at ``strategy_path``, or None."""
    from autodist.strategies.cost.calibration import JOB_CALIBRATION_FILE, read_calibration_file
    return read_calibration_file(os.path.join(os.path.dirname(strategy_path), JOB_CALIBRATION_FILE))


def write_fingerprint(directory, item):
    """Write ``item``'s fingerprint (``capture.fingerprint``) into ``directory``, next to the strategy; its path."""
    from autodist.capture.fingerprint import fingerprint
    from autodist.fileio import atomic_write_bytes
    path = os.path.join(directory, FINGERPRINT_FILE)
    atomic_write_bytes(path, json.dumps(fingerprint(item)).encode())
    return path


def check_fingerprint(strategy_path, item, me, chief):
    """A member: ``item`` is the graph the chief planned for (its fingerprint next to the strategy), else
    ``GraphMismatchError`` naming the first difference."""
    from autodist.capture.fingerprint import check_same_graph, fingerprint
    try:
        with open(os.path.join(os.path.dirname(strategy_path), FINGERPRINT_FILE)) as f:
            chiefs = json.load(f)
    except (OSError, ValueError) as e:
        raise LaunchError("node {}: cannot read the chief's fingerprint next to its strategy ({})".format(me, e)) \
            from None
    check_same_graph(chiefs, fingerprint(item), me, chief)


def script_argv():
    """The chief's script and arguments, to start the same program on the other nodes."""
    if not sys.argv or not sys.argv[0] or sys.argv[0] in ("-c", "-m"):
        raise LaunchError("the other nodes run the same script as the chief, but this program was not "
                          "started from a script file (sys.argv[0] is {!r}); put the training code in a "
                          "file and run `python file.py`".format(sys.argv[0] if sys.argv else ""))
    return [os.path.abspath(sys.argv[0])] + sys.argv[1:]

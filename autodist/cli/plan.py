"""``autodist plan``: print a strategy's plan without training.

    autodist plan -r SPEC -s BUILDER [--arg key=value ...] [--format table|json] GRAPH_ITEM_FILE
    autodist plan [-r SPEC] [-s BUILDER] [--arg ...] SCRIPT.py [script args ...]
    ... [--png FILE] [--dot FILE] [--dump-graphs DIR]     pictures and graphs (``autodist.cli.plan_views``)

A GraphItem file (written by ``GraphItem.serialize``) is planned directly; it
needs ``-r``, and ``-s`` defaults to PSLoadBalancing, AutoDist's default. A
``.py`` target is run in this process as ``autodist run`` runs it
(``runtime.autorun.run.capture_script``) until it asks for its first distributed
session, and stopped there: nothing trains. A script that uses the API gives
its AutoDist object: the captured graph, and its resource spec and builder
unless ``-r`` / ``-s`` replace them (options on the command line win). An
unmodified tf.compat.v1 or Keras script (one ``autodist run`` accepts) is
captured at its first ``Session`` / ``MonitoredTrainingSession`` on the
training graph, or its first ``fit``, and needs ``-r``. ``--arg`` values are Python
literals where they parse (``sync=False``, ``chunk_size=64``, ``seed=None``),
strings otherwise (``all_reduce_spec=RING``).

Every plan also gives its predicted step time and communication share
(``autodist.strategies.cost``): one replica's step is measured here once per
graph and ``--batch`` (cached; ``--compute estimate`` counts float operations and ops
instead), the network figures are ``autodist calibrate``'s cache or the spec's
prior (this command never starts servers on the cluster to measure it; a job's
chief does, for AutoStrategy, the first time). With ``-s AutoStrategy`` the JSON gains an ``"auto"`` object (the
chosen candidate and every candidate's prediction and arguments: AllReduce's ``bucket_bytes`` is the
bucket size it was priced cheapest at) and the table a candidates table.
"""
import argparse
import ast
import inspect
import json
import os
import sys

from autodist.cli import plan_views
from autodist.errors import CaptureError, StrategyError

__all__ = ["register", "make_builder", "parse_builder_args", "builder_from_args", "require_file"]


def _builders():
    from autodist.strategies import BUILDERS
    return BUILDERS


def _add_options(parser, default=None):
    parser.add_argument("-r", "--resource-spec", metavar="SPEC", default=default,
                        help="resource spec (YAML); required for a GraphItem file")
    parser.add_argument("-s", "--strategy", metavar="BUILDER", default=default,
                        help="strategy builder: {} (default: the script's, or "
                             "PSLoadBalancing)".format(", ".join(_builders())))
    parser.add_argument("--arg", dest="builder_args", action="append",
                        default=[] if default is None else default, metavar="KEY=VALUE",
                        help="builder constructor argument (repeatable)")
    parser.add_argument("--format", choices=("table", "json"),
                        default="table" if default is None else default,
                        help="output format (default: table)")
    parser.add_argument("--compute", choices=("measure", "estimate"), default="measure" if default is None else default,
                        help="one replica's step for the predicted step time: run the graph here once (cached) "
                             "or estimate it from its float operations and ops (default: measure)")
    parser.add_argument("--batch", type=int, default=32 if default is None else default,
                        help="examples per replica where the graph's inputs leave the batch open (default: 32)")
    plan_views.add_options(parser, default)


def register(subparsers):
    parser = subparsers.add_parser(
        "plan", help="print the distribution plan of a graph or script without training",
        description="Print how a strategy builder distributes a captured graph: one row per "
                    "variable, bytes held and moved per device and step, and the load imbalance.")
    _add_options(parser)
    parser.add_argument("target", metavar="GRAPH_ITEM_FILE|SCRIPT",
                        help="a file written by GraphItem.serialize, or a training script (.py)")
    parser.add_argument("script_args", nargs=argparse.REMAINDER, metavar="ARGS",
                        help="arguments passed to the script")
    parser.set_defaults(handler=_plan)


def _late_options(args):
    """Options written after a GraphItem file, which argparse hands over as script ARGS."""
    late = argparse.ArgumentParser(prog="autodist plan", add_help=False, exit_on_error=False)
    _add_options(late, default=argparse.SUPPRESS)
    try:
        options, rest = late.parse_known_args(args.script_args)
    except argparse.ArgumentError as exc:
        raise StrategyError(str(exc)) from None
    if rest:
        raise StrategyError("{}: a GraphItem file takes no arguments (got {}); scripts must end "
                            "in .py".format(args.target, " ".join(rest)))
    for key, value in vars(options).items():
        setattr(args, key, args.builder_args + value if key == "builder_args" else value)
    args.script_args = []


def parse_builder_args(items):
    """``["sync=False", "spec=RING"] -> {"sync": False, "spec": "RING"}``."""
    kwargs = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key.isidentifier():
            raise StrategyError("--arg {!r}: expected KEY=VALUE, e.g. --arg sync=False".format(item))
        try:
            kwargs[key] = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            kwargs[key] = text
    return kwargs


def make_builder(name, kwargs):
    """The builder ``name`` constructed with ``kwargs``; StrategyError names what is wrong."""
    builders = _builders()
    if name not in builders:
        raise StrategyError("unknown strategy builder {!r}; choose one of: {}".format(
            name, ", ".join(builders)))
    cls = builders[name]
    accepted = [p for p in inspect.signature(cls.__init__).parameters if p != "self"]
    unknown = sorted(set(kwargs) - set(accepted))
    if unknown:
        raise StrategyError("{} has no argument {}; its arguments are: {}".format(
            name, ", ".join(repr(k) for k in unknown), ", ".join(accepted)))
    return cls(**kwargs)


def builder_from_args(args):
    """The builder that ``-s`` / ``--arg`` ask for, or None without ``-s``."""
    if args.builder_args and not args.strategy:
        raise StrategyError("--arg needs -s/--strategy: the arguments belong to a builder")
    return make_builder(args.strategy, parse_builder_args(args.builder_args)) if args.strategy else None


def require_file(path):
    """FileNotFoundError (what the CLI reports as a missing file) unless ``path`` is a file."""
    if not os.path.isfile(path):
        raise FileNotFoundError(2, "No such file", path)


def _plan(args):
    from autodist.runner.console import quiet_tensorflow_start
    quiet_tensorflow_start()   # TensorFlow's start-up chatter stays off the console, as under autodist run
    from autodist.spec.resource_spec import ResourceSpec
    is_script = args.target.endswith(".py")
    if not is_script and args.script_args:
        _late_options(args)
    builder = builder_from_args(args)
    spec = ResourceSpec(args.resource_spec) if args.resource_spec else None
    if args.png:   # before the script runs: say at once what to install
        from autodist.strategies.picture import require_matplotlib
        require_matplotlib()
    if is_script:
        graph_item, spec, builder = _from_script(args.target, args.script_args, spec, builder)
    else:
        graph_item, builder = _from_graph_item_file(args, spec, builder)
    strategy, report, auto = _plan_report(graph_item, spec, builder)
    print(_render(graph_item, spec, strategy, report, auto, args))
    plan_views.write_views(args, graph_item, spec, strategy, report, sys.stderr)
    return 0


def _from_graph_item_file(args, spec, builder):
    if spec is None:
        raise StrategyError("planning GraphItem file {} needs a resource spec: add -r SPEC"
                            .format(args.target))
    require_file(args.target)
    from autodist.capture.graph_item import GraphItem
    from autodist.strategies import PSLoadBalancing
    return GraphItem.deserialize(args.target), builder or PSLoadBalancing()


def _from_script(script, script_args, spec, builder):
    """Run ``script`` as ``autodist run`` would, until its first distributed session; (graph item, spec, builder)
    with CLI overrides. A script that uses the API gives its own AutoDist (spec and builder); an unmodified
    tf.compat.v1 or Keras script is captured as ``autodist run`` captures it and needs ``-r``."""
    from autodist.api import AutoDist
    from autodist.runtime.autorun.run import capture_script
    from autodist.spec.resource_spec import ResourceSpec
    planner = AutoDist(spec or ResourceSpec.from_dict({"nodes": [{"address": "127.0.0.1"}]}, path="<plan>"),
                       builder)
    asked, status = capture_script(planner, script, script_args)
    if asked is None:
        raise CaptureError("{} {} asking for a distributed session; plan needs a script that trains through a "
                           "tf.compat.v1 Session or MonitoredTrainingSession, Keras fit or "
                           "ad.create_distributed_session() (docs/running.md)".format(
                               script, "finished without" if status is None else
                               "exited (status {}) before".format(status)))
    if asked is planner and spec is None:
        raise CaptureError("{} has no AutoDist of its own (it is planned as autodist run would run it, stopped at "
                           "its first session): give the cluster with -r SPEC".format(script))
    return asked.graph_item, spec or asked.resource_spec, builder or asked.strategy_builder


def _plan_report(graph_item, spec, builder):
    """The builder's strategy, its PlanReport and, for AutoStrategy, its search (else None)."""
    from autodist.ir.utils import gc_frozen
    from autodist.strategies import AutoStrategy
    from autodist.strategies.inputs import batch_statistics, builder_variables
    from autodist.strategies.report import plan_report
    with gc_frozen():   # as a job's plan (strategy_handoff.build_strategy): the captured graph outlives it
        auto = builder.search(graph_item, spec) if isinstance(builder, AutoStrategy) else None
        strategy = auto.strategy if auto is not None else builder.build(graph_item, spec)
    return strategy, plan_report(strategy, builder_variables(graph_item), spec, repr(builder),
                                 batch_statistics(graph_item)), auto


def _render(graph_item, spec, strategy, report, auto, args):
    from autodist.strategies.inputs import builder_variables
    from autodist.strategies.report import format_table
    prediction, sources = _prediction(graph_item, spec, strategy, builder_variables(graph_item), args)
    if args.format == "json":
        data = report.to_dict()
        data["prediction"] = dict(prediction.to_dict(), **sources)
        if auto is not None:
            data["auto"] = auto.to_dict()
        return json.dumps(data, indent=2)
    table = format_table(report).split("\n")
    extra = [_prediction_line(prediction, sources)] + (_auto_lines(auto) if auto is not None else [])
    return "\n".join(table[:-1] + extra + table[-1:])


def _prediction(graph_item, spec, strategy, variables, args):
    """The plan's predicted step (measured or estimated compute, cached or prior calibration)."""
    from autodist.strategies.cost import cluster_calibration, estimate_compute, predict
    from autodist.strategies.cost.compute import measure_or_estimate
    from autodist.strategies.inputs import batch_statistics
    calibration = cluster_calibration(spec)
    if args.compute == "measure":
        compute = measure_or_estimate(graph_item, calibration, args.batch)
    else:
        compute = estimate_compute(graph_item, calibration, args.batch)
    sources = {"calibration": calibration.source, "compute": compute.source, "batch": args.batch}
    return predict(strategy, variables, compute, calibration, chief=spec.chief,
                   statistics=batch_statistics(graph_item)), sources


def _prediction_line(prediction, sources):
    waits = (", waiting for another node's compute {:.2f} ms while the communication runs (the step pays the "
             "longer; a local proxy or all-reduce avoids the wait)".format(prediction.wait_s * 1e3)
             if prediction.wait_s else "")
    statistics = (", synchronized batch norm {:.2f} ms".format(prediction.statistics_s * 1e3)
                  if prediction.statistics_s else "")
    return ("predicted step {:.2f} ms: compute {:.2f} ms ({}, batch {}), fixed {:.2f} ms{}{}, communication {:.2f} ms "
            "of which {:.2f} ms exposed ({:.0%} of the step; calibration: {})".format(
                prediction.step_s * 1e3, prediction.compute_s * 1e3, sources["compute"], sources["batch"],
                prediction.fixed_s * 1e3, statistics, waits, prediction.comm_s * 1e3, prediction.exposed_comm_s * 1e3,
                prediction.comm_share, sources["calibration"] if sources["calibration"] != "prior" else
                "the spec's prior; autodist calibrate -r SPEC measures the cluster"))


def _auto_lines(auto):
    """AutoStrategy's candidates as a table, the chosen one marked."""
    from autodist.strategies.auto import SEARCHED, search_margin
    from autodist.strategies.report import exact_bytes
    lines = ["", "AutoStrategy chose {} ({:.2f} ms predicted with the search's compute figure):".format(
        auto.chosen, auto.prediction.step_s * 1e3)]
    for name, prediction in auto.candidates:
        bucket = (auto.arguments_of(name) or {}).get("bucket_bytes")
        lines.append("  {} {:<16} {:>10.2f} ms  communication {:>4.0%}{}".format(
            "*" if name == auto.chosen else " ", name, prediction.step_s * 1e3, prediction.comm_share,
            "  buckets of {}".format(exact_bytes(bucket)) if bucket else ""))
    searched = dict(auto.candidates).get(SEARCHED)
    if auto.chosen != SEARCHED and searched is not None and searched.step_s < auto.prediction.step_s:
        relays = "; this one relays its all-reduce through the chief" if searched.relayed else ""
        lines.append("  (a searched plan replaces the best preset only when predicted at least {:.0%} cheaper{})".format(
            search_margin(searched), relays))
    return lines + [""]

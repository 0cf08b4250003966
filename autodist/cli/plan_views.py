"""``autodist plan``'s pictures and graph dumps: ``--png``, ``--dot``, ``--dump-graphs``.

    autodist plan -r SPEC -s PS --png plan.png --dot plan.dot --dump-graphs graphs/ train.py

``--png`` / ``--dot`` draw the plan (``autodist.strategies.picture``).
``--dump-graphs DIR`` transforms the graph for the chief's node, as a job
would, and writes the graph before the passes and after each of them, one
TensorBoard run each::

    DIR/00-captured  DIR/01-partition  DIR/02-replicate  ...      tensorboard --logdir DIR  (Graphs tab)
"""
import os
import re

__all__ = ["add_options", "write_views", "dump_graphs"]


def add_options(parser, default=None):
    """The three options (``default``: argparse.SUPPRESS for options given after a GraphItem file)."""
    parser.add_argument("--png", metavar="FILE", default=default, help="draw the plan into a PNG file")
    parser.add_argument("--dot", metavar="FILE", default=default, help="write the plan as Graphviz DOT text")
    parser.add_argument("--dump-graphs", metavar="DIR", default=default,
                        help="write the graph before and after each kernel pass, for TensorBoard's graph view")


def write_views(args, graph_item, spec, strategy, report, out):
    """Write what ``args`` asks for; one line on ``out`` per file or directory written."""
    if args.png or args.dot:
        from autodist.strategies.picture import plan_dot, plan_layout, plan_png
        layout = plan_layout(report, spec)
        if args.png:
            print("wrote {}".format(plan_png(layout, args.png)), file=out)
        if args.dot:
            with open(args.dot, "w") as f:
                f.write(plan_dot(layout))
            print("wrote {}".format(args.dot), file=out)
    if args.dump_graphs:
        runs = dump_graphs(args.dump_graphs, graph_item, spec, strategy)
        print("wrote {} graphs into {} (tensorboard --logdir {})".format(len(runs), args.dump_graphs,
                                                                       args.dump_graphs), file=out)


def _run_name(index, pass_name):
    return "{:02d}-{}".format(index, re.sub(r"[^A-Za-z0-9_.-]+", "_", pass_name))


def dump_graphs(directory, graph_item, spec, strategy):
    """The chief's node's graph before and after each pass, one TensorBoard run each; the run directories."""
    from autodist.kernel.assignment import NodeContext
    from autodist.kernel.graph_transformer import GraphTransformer
    from autodist.runtime.watch.summaries import write_graph
    from autodist.strategies import StrategyCompiler
    graph_item.prepare()   # as the job does before it transforms (a script's item comes unprepared)
    compiled = StrategyCompiler(graph_item, spec).compile(strategy)
    chief = spec.task_index(spec.chief)
    node = NodeContext(job_id="plan", task_index=chief, num_tasks=len(spec.nodes), chief_task=chief)
    runs = [write_graph(os.path.join(directory, _run_name(0, "captured")), graph_item.graph_def)]

    def observe(name, item):
        runs.append(write_graph(os.path.join(directory, _run_name(len(runs), name)), item.graph_def))
    GraphTransformer(compiled, node, observe=observe).transform(graph_item)
    return runs

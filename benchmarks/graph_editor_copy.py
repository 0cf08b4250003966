"""Benchmark: autodist.graph_editor.copy of a large graph vs a plain import_graph_def.

    python benchmarks/graph_editor_copy.py                 # 20,000 ops, best of 5
    python benchmarks/graph_editor_copy.py --ops 2000 --repeats 1   # CI smoke size

The source is a training graph (dense layers, loss, tf.gradients, SGD updates
on resource variables) grown until it has at least ``--ops`` ops. Measured,
each as the best of ``--repeats`` runs (interleaved) on a fresh destination:

* ``import_graph_def``: ``tf.compat.v1.import_graph_def(graph.as_graph_def())``
  into a new graph, the C++ floor the fast copy builds on;
* ``copy_to_new_graph``: ``ge.copy(graph, dst_graph=new_graph)``;
* ``copy_same_graph_scoped``: ``ge.copy(graph, dst_scope="AutoDist-Replica-1")``
  into the source graph itself (fresh copy of the source for each run);
* ``per_op_copy`` (``--per-op``): the same copy through a custom
  ``transform_op_handler``, i.e. one Python op creation per op.

Prints a table and writes ``benchmarks/results/graph_editor_copy.json``.
"""
import argparse
import json
import os
import platform
import time

import tensorflow as tf

from autodist import graph_editor as ge

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                       "graph_editor_copy.json")


def build_graph(min_ops, width=16):
    """A training graph with at least ``min_ops`` ops."""
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, width], name="x")
        y = tf.compat.v1.placeholder(tf.float32, [None, width], name="y")
        block = 0
        while len(graph.get_operations()) < min_ops:
            with tf.compat.v1.variable_scope("block{}".format(block)):
                h = x
                weights = []
                for layer in range(8):
                    w = tf.compat.v1.get_variable(
                        "w{}".format(layer), [width, width], use_resource=True,
                        initializer=tf.compat.v1.initializers.random_normal(stddev=0.1))
                    weights.append(w)
                    h = tf.nn.tanh(tf.matmul(h, w))
                loss = tf.reduce_mean(tf.square(h - y))
                grads = tf.gradients(loss, weights)
                tf.compat.v1.train.GradientDescentOptimizer(0.1).apply_gradients(
                    list(zip(grads, weights)))
            block += 1
    return graph


def per_op_handler(info, op, new_inputs):
    return ge.copy_op_handler(info, op, new_inputs)


def measure(graph, repeats, per_op):
    """Best time of each variant; the variants alternate within each repeat so
    that a busy machine slows them alike."""
    graph_def = graph.as_graph_def()

    def import_into_new():
        with tf.Graph().as_default():
            tf.compat.v1.import_graph_def(graph_def, name="")

    def copy_into_new():
        ge.copy(graph, dst_graph=tf.Graph())

    def fresh_source():
        source = tf.Graph()
        with source.as_default():
            tf.compat.v1.import_graph_def(graph_def, name="")
        return source

    def copy_per_op():
        transformer = ge.Transformer()
        transformer.transform_op_handler = per_op_handler
        transformer(graph, tf.Graph(), "")

    times = {"import_graph_def_s": [], "copy_to_new_graph_s": [],
             "copy_same_graph_scoped_s": []}
    for _ in range(repeats):
        times["import_graph_def_s"].append(_timed(import_into_new))
        times["copy_to_new_graph_s"].append(_timed(copy_into_new))
        source = fresh_source()
        times["copy_same_graph_scoped_s"].append(
            _timed(lambda: ge.copy(source, dst_scope="AutoDist-Replica-1")))
    if per_op:
        times["per_op_copy_s"] = [_timed(copy_per_op)]
    return {key: min(values) for key, values in times.items()}


def _timed(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--per-op", action="store_true", help="also time the per-op copy path")
    parser.add_argument("--output", default=RESULTS)
    args = parser.parse_args()

    start = time.perf_counter()
    graph = build_graph(args.ops)
    build_s = time.perf_counter() - start
    num_ops = len(graph.get_operations())
    results = measure(graph, args.repeats, args.per_op)
    base = results["import_graph_def_s"]
    report = {
        "ops": num_ops,
        "repeats": args.repeats,
        "build_graph_s": round(build_s, 3),
        "tensorflow": tf.__version__,
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
    }
    for key, value in results.items():
        report[key] = round(value, 4)
        if key != "import_graph_def_s":
            report[key[:-2] + "_ratio"] = round(value / base, 3)
    width = max(len(key) for key in report)
    for key, value in report.items():
        print("{:<{}}  {}".format(key, width, value))
    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    with open(args.output, "w") as handle:
        json.dump(report, handle, indent=2, sort_keys=True)
        handle.write("\n")
    print("written", args.output)


if __name__ == "__main__":
    main()

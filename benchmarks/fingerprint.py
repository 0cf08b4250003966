"""Time a GraphItem's fingerprint (``autodist.capture.fingerprint``) on a graph with many variables under SGD.

    python benchmarks/fingerprint.py [--variables 10000] [--repeat 3]

What the same-graph check costs a job: the chief computes the fingerprint and
ships it with its plan, every other process computes its own and compares.
Each row is a ratio to ``graph.as_graph_def()`` of the same graph, timed in the
same run, interleaved (a step every job's processes take anyway: the kernel
rewrites the GraphDef), and the fingerprint's size as shipped (JSON bytes).
"""
import argparse
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tensorflow as tf  # noqa: E402

from _results import save  # noqa: E402
from autodist.capture.fingerprint import fingerprint, first_difference  # noqa: E402
from autodist.capture.graph_item import GraphItem  # noqa: E402
from autodist.capture.optimizers import capture_optimizers  # noqa: E402

tf1 = tf.compat.v1


def build(num_vars, lr=0.1):
    graph = tf.Graph()
    item = GraphItem(graph)
    with graph.as_default(), capture_optimizers(), item.as_default():
        x = tf1.placeholder(tf.float32, [None, 4])
        variables = [tf1.get_variable("v%d" % i, initializer=tf.ones([4, 1])) for i in range(num_vars)]
        loss = tf.add_n([tf.reduce_sum(tf.matmul(x, v)) for v in variables])
        tf1.train.GradientDescentOptimizer(lr).minimize(loss)
        item.info.update_variables(tf1.global_variables())
    return item


def _timed(fn):
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def measure(num_vars, repeat):
    """The chief's fingerprint and a member's (its own fingerprint and the comparison), each as a ratio to
    ``as_graph_def`` of the same graph; a member's graph is built apart, alike, and once with another rate."""
    item, twin, other = build(num_vars), build(num_vars), build(num_vars, lr=0.5)
    rows = []
    for _ in range(repeat):   # interleaved: the baseline, the chief's part, a member's part
        base, graph_def = _timed(item.graph.as_graph_def)
        chief_s, chiefs = _timed(lambda: fingerprint(item))
        member_s, agreed = _timed(lambda: first_difference(chiefs, fingerprint(twin)))
        rows.append({"as_graph_def_s": base, "chief_s": chief_s, "member_s": member_s,
                     "chief_ratio": chief_s / base, "member_ratio": member_s / base})
    found = first_difference(chiefs, fingerprint(other))
    middle = len(rows) // 2
    return {"variables": num_vars, "ops": len(graph_def.node), "json_bytes": len(json.dumps(chiefs)), "runs": rows,
            "median_chief_ratio": sorted(r["chief_ratio"] for r in rows)[middle],
            "median_member_ratio": sorted(r["member_ratio"] for r in rows)[middle],
            "agreed": agreed is None, "difference": found}


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--variables", type=int, default=10000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    results = measure(args.variables, args.repeat)
    print("{variables} variables, {ops} ops: the chief's fingerprint {median_chief_ratio:.2f} x, a member's "
          "fingerprint and comparison {median_member_ratio:.2f} x as_graph_def of the same graph (medians of {n}); "
          "{json_bytes} bytes shipped; a learning rate of 0.5 instead of 0.1: {difference}".format(
              n=len(results["runs"]), **results))
    save("fingerprint", results)
    return results


if __name__ == "__main__":
    main()

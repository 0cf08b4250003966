"""How fast the strategy builders plan, and how evenly the PS builders balance.

    python benchmarks/strategy_builders.py                     # 1k, 10k, 100k variables
    python benchmarks/strategy_builders.py --sizes 200 400 --repeats 1    # smoke size

No TensorFlow: builders run on synthetic ``BuilderVariable`` lists
(``builder.build_from_variables(variables, resource_spec)``, the same code
``build`` runs after reading the graph's variables). Two realistic size mixes are generated from the
layer shapes of ResNet-50 (161 trainable variables, 25.6M parameters, 3x3 and
1x1 convolutions with batch-norm vectors) and BERT-base (199 variables, 110M
parameters, a 30522 x 768 word embedding with a sparse gradient); a list of n
variables repeats the model's list under prefixes ``rep<k>/``.

Timing: every builder on the mixed list at each size, on a cluster of 8 nodes
with 8 GPUs each (64 replicas, 8 CPU servers); best wall time of ``--repeats``,
reported as variables per second (the goal is >= 100k/s).

Balance: λ = max / mean server bytes for PSLoadBalancing, PartitionedPS and
UnevenPartitionedPS on one ResNet-50 and one BERT-base, for 2 to 16 servers,
and on the 10k-variable mix, next to AutoDist's greedy assignment in graph
order (the baseline, computed here in a few lines) and two lower bounds: the
largest variable over the mean load (no plan that keeps variables whole can do
better) and the largest piece left after splitting each variable along axis 0
into at most ``servers`` shards (no axis-0 partitioning can do better).
Results go to ``benchmarks/results/strategy_builders.json``.
"""
import argparse
import heapq
import importlib.util
import os
import time

from autodist.spec.resource_spec import ResourceSpec
from autodist.strategies import BUILDERS
from autodist.strategies.inputs import BuilderVariable
from autodist.strategies.report import load_imbalance, plan_report

_HERE = os.path.dirname(os.path.abspath(__file__))


def _save(name, results, results_dir=None):
    """``benchmarks/_results.save`` (loaded by path: this file also runs outside benchmarks/)."""
    spec = importlib.util.spec_from_file_location("_results", os.path.join(_HERE, "_results.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if results_dir is not None:
        module.RESULTS_DIR = results_dir
    return module.save(name, results)


def resnet50_shapes():
    """(name, shape, sparse) of ResNet-50's trainable variables, in graph order."""
    shapes = [("conv1/kernel", (7, 7, 3, 64)), ("bn1/gamma", (64,)), ("bn1/beta", (64,))]
    channels = 64
    for stage, (blocks, width) in enumerate(zip((3, 4, 6, 3), (64, 128, 256, 512)), start=2):
        for block in range(blocks):
            p = "stage{}/block{}/".format(stage, block)
            convs = [("a", (1, 1, channels, width)), ("b", (3, 3, width, width)),
                     ("c", (1, 1, width, 4 * width))]
            if block == 0:
                convs.append(("shortcut", (1, 1, channels, 4 * width)))
            for label, shape in convs:
                shapes += [(p + label + "/kernel", shape), (p + label + "/bn/gamma", shape[-1:]),
                           (p + label + "/bn/beta", shape[-1:])]
            channels = 4 * width
    shapes += [("fc/kernel", (2048, 1000)), ("fc/bias", (1000,))]
    return [(name, shape, False) for name, shape in shapes]


def bert_base_shapes():
    """(name, shape, sparse) of BERT-base's trainable variables; the word embedding is sparse."""
    hidden, ffn = 768, 3072
    shapes = [("embeddings/word", (30522, hidden), True),
              ("embeddings/position", (512, hidden), False),
              ("embeddings/token_type", (2, hidden), False),
              ("embeddings/ln/gamma", (hidden,), False), ("embeddings/ln/beta", (hidden,), False)]
    for layer in range(12):
        p = "layer{}/".format(layer)
        for dense, shape in (("query", (hidden, hidden)), ("key", (hidden, hidden)),
                             ("value", (hidden, hidden)), ("attention_output", (hidden, hidden)),
                             ("intermediate", (hidden, ffn)), ("output", (ffn, hidden))):
            shapes += [(p + dense + "/kernel", shape, False), (p + dense + "/bias", shape[-1:], False)]
            if dense in ("attention_output", "output"):
                shapes += [(p + dense + "/ln/gamma", (hidden,), False),
                           (p + dense + "/ln/beta", (hidden,), False)]
    shapes += [("pooler/kernel", (hidden, hidden), False), ("pooler/bias", (hidden,), False)]
    return shapes


def plan_variables(shapes, n=None):
    """BuilderVariables of ``shapes`` (float32), repeated under ``rep<k>/`` up to ``n`` entries."""
    n = len(shapes) if n is None else n
    result = []
    while len(result) < n:
        prefix = "rep{}/".format(len(result) // len(shapes)) if n > len(shapes) else ""
        for name, shape, sparse in shapes[:n - len(result)]:
            elements = 1
            for d in shape:
                elements *= d
            result.append(BuilderVariable(prefix + name + ":0", prefix + name, shape, "float32",
                                       4 * elements, sparse))
    return result


def mixed(n):
    """Half ResNet-50-shaped, half BERT-base-shaped variables, interleaved by model copy."""
    return plan_variables(resnet50_shapes(), n // 2) + plan_variables(bert_base_shapes(), n - n // 2)


def cluster(nodes, gpus_per_node):
    data = {"nodes": [{"address": "10.1.{}.{}".format(i // 250, i % 250 + 1),
                       "gpus": list(range(gpus_per_node))} for i in range(nodes)],
            "ssh": {"lab": {"username": "bench"}}}
    data["nodes"][0]["chief"] = True
    for node in data["nodes"][1:]:
        node["ssh_config"] = "lab"
    return ResourceSpec.from_dict(data, path="<benchmark cluster>")


def graph_order_greedy_imbalance(variables, servers):
    """AutoDist's PSLoadBalancing: each variable, in graph order, to the least loaded server."""
    heap = [(0, i) for i in range(servers)]
    for var in variables:
        load, i = heap[0]
        heapq.heapreplace(heap, (load + var.byte_size, i))
    return load_imbalance([load for load, _ in heap])


def time_builders(sizes, repeats, spec):
    rows = []
    for n in sizes:
        variables = mixed(n)
        for name, cls in BUILDERS.items():
            builder = cls()
            best = min(_timed(builder.build_from_variables, variables, spec) for _ in range(repeats))
            rows.append({"builder": name, "variables": n, "seconds": round(best, 6),
                         "variables_per_second": round(n / best)})
            print("{:>22} {:>7} variables  {:8.3f} s  {:>10,} vars/s".format(
                name, n, best, round(n / best)))
    return rows


def _timed(fn, *args):
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def lower_bounds(variables, servers):
    """λ no plan can beat: unsplit (largest variable) and axis-0 split into <= servers shards."""
    mean = sum(v.byte_size for v in variables) / servers
    unsplit = max(v.byte_size for v in variables)
    split = max(-(-v.shape[0] // min(v.shape[0], servers)) * (v.byte_size // v.shape[0])
                if v.shape else v.byte_size for v in variables)
    return max(1.0, unsplit / mean), max(1.0, split / mean)


def balance(server_counts):
    rows = []
    models = (("resnet50", plan_variables(resnet50_shapes())),
              ("bert_base", plan_variables(bert_base_shapes())), ("mixed_10k", mixed(10000)))
    for model, variables in models:
        for servers in server_counts:
            spec = cluster(servers, 1)
            unsplit, split = lower_bounds(variables, servers)
            row = {"model": model, "servers": servers, "bound_unsplit": round(unsplit, 4),
                   "bound_axis0": round(split, 4),
                   "graph_order_greedy": round(graph_order_greedy_imbalance(variables, servers), 4)}
            for name in ("PSLoadBalancing", "PartitionedPS", "UnevenPartitionedPS"):
                strategy = BUILDERS[name]().build_from_variables(variables, spec)
                row[name] = round(plan_report(strategy, variables, spec).imbalance, 4)
            rows.append(row)
            print("{:>10} {:>3} servers  greedy {graph_order_greedy:.3f}  PSLoadBalancing "
                  "{PSLoadBalancing:.3f} (bound {bound_unsplit:.3f})  PartitionedPS "
                  "{PartitionedPS:.3f}  UnevenPartitionedPS {UnevenPartitionedPS:.3f} "
                  "(bound {bound_axis0:.3f})".format(model, servers, **row))
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--servers", type=int, nargs="+", default=[2, 4, 8, 16])
    parser.add_argument("--results-dir", help="where to write the JSON (default: benchmarks/results)")
    args = parser.parse_args(argv)
    spec = cluster(8, 8)
    print("planning speed (8 nodes x 8 GPUs: 64 replicas, 8 CPU servers)")
    timing = time_builders(args.sizes, args.repeats, spec)
    print("load imbalance λ = max / mean server bytes")
    lambdas = balance(args.servers)
    _save("strategy_builders", {"timing": timing, "imbalance": lambdas,
                                "models": {"resnet50": len(resnet50_shapes()),
                                           "bert_base": len(bert_base_shapes())}},
          results_dir=args.results_dir)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""A plan of a large graph with the heap frozen (``gc_frozen``) against the collector as it was, interleaved.

    python benchmarks/plan_gc.py                          # 10k variables, AutoStrategy, 3 pairs
    python benchmarks/plan_gc.py --builder PSLoadBalancing --variables 2000 --pairs 2

One process captures ``planning_time``'s towers model once, then plans it
(``runtime.strategy_handoff.build_strategy``, AutoStrategy on the prior) in
pairs: ``frozen`` as autodist plans, ``collected`` with ``gc_frozen`` replaced
by a block that does nothing, so every automatic full collection walks the
graph's and the capture's live objects. The pairs alternate which goes first
(a process's first plan warms caches). Columns: each pair's seconds, the
medians, and the ratio frozen / collected of the medians. The JSON goes to
``benchmarks/results/<label>.json``.
"""
import argparse
import contextlib
import gc
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import _results  # noqa: E402
from planning_time import SPEC, build_model  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variables", type=int, default=10000)
    parser.add_argument("--depth", type=int, default=10)
    parser.add_argument("--builder", default="AutoStrategy")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--label", default="plan_gc")
    args = parser.parse_args(argv)
    from autodist.runner.console import quiet_tensorflow_start
    quiet_tensorflow_start()
    import tensorflow as tf
    from autodist import AutoDist, strategies
    from autodist.runtime import strategy_handoff
    builder = getattr(strategies, args.builder)(**({"probe": False} if args.builder == "AutoStrategy" else {}))
    ad = AutoDist(SPEC, builder)
    print("capturing {} variables ...".format(args.variables), flush=True)
    with tf.Graph().as_default(), ad.scope():
        build_model(tf, args.variables, args.depth, "sgd")
    item = ad.graph_item.prepare()
    frozen_block = strategy_handoff.gc_frozen
    load_start, live = os.getloadavg(), len(gc.get_objects())
    times = {"frozen": [], "collected": []}
    try:
        for pair in range(args.pairs):
            order = ("frozen", "collected") if pair % 2 == 0 else ("collected", "frozen")
            for mode in order:
                strategy_handoff.gc_frozen = frozen_block if mode == "frozen" else contextlib.nullcontext
                started = time.perf_counter()
                strategy_handoff.build_strategy(item, ad.resource_spec, builder)
                times[mode].append(time.perf_counter() - started)
                print("pair {}/{} {:>9}: plan {:.2f} s".format(pair + 1, args.pairs, mode, times[mode][-1]), flush=True)
    finally:
        strategy_handoff.gc_frozen = frozen_block
    medians = {mode: statistics.median(values) for mode, values in times.items()}
    ratio = medians["frozen"] / medians["collected"]
    print("\n{} on {} variables ({} live objects): frozen {:.2f} s, collected {:.2f} s, ratio {:.2f}".format(
        args.builder, args.variables, live, medians["frozen"], medians["collected"], ratio))
    _results.save(args.label, {"builder": args.builder, "variables": args.variables, "live_objects": live,
                               "times_s": times, "medians_s": medians, "ratio": ratio, "load_start": load_start,
                               "load_end": os.getloadavg(), "argv": sys.argv[1:] if argv is None else argv})
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Each node's link rate, measured by the probe (the cost model scales by it: ``cost.calibration.node_bandwidth``).

The probe's transport figures (``rpc_bandwidth``, ``collective_bandwidth``)
are measured over particular paths: a fetch from the last node to the chief,
a ring through every node. On a cluster whose links differ (one slower NIC,
an emulated cluster with ``autodist cluster link N rate ...``) they describe
those paths only. This module measures every node's own link, so that the
model can scale the transports per node::

    pairs          node j -> node k for every pair (j < k; chief pairs and a ring beyond MAX_ALL_PAIRS)
    pair rate      bytes / (fetch of a slice of a variable on j, summed on k  -  the same of 1 float),
                   the slice grown from 1 MiB (x4, up to 64 MiB) until a transfer takes TARGET_S
    node rate      the fastest pair it is in: a path runs at its slower end, so a node with a faster
                   peer shows its own rate (two nodes: both get their path's)
    per node       transport bandwidth x node rate / the rate of the path it was measured on
                   (``node_bandwidth``; 1 x when every link is alike)

Only one direction of each pair is timed: links are taken as symmetric (a
NIC's, a ``tc tbf`` limit set both ways as ``autodist cluster`` sets it).
"""
import statistics
import time

__all__ = ["SIZES", "TARGET_S", "MAX_ALL_PAIRS", "link_pairs", "link_graph", "measure_links", "median_time", "node_rates"]

SIZES = (1 << 20, 4 << 20, 16 << 20, 64 << 20)   # bytes of the slices a pair may move
TARGET_S = 0.25        # a timed transfer takes at least this long (or moves the largest slice)
#: Up to this many nodes every pair is timed; beyond, the chief's pairs and a ring (every node in two or three
#: pairs): all 28 pairs of 8 hosts at 250 Mbit/s took 90 s of a 200 s probe.
MAX_ALL_PAIRS = 4


def link_pairs(n):
    """``[(j, k), ...]``: device indices (0: the chief) of the pairs timed, each from j to k."""
    if n <= MAX_ALL_PAIRS:
        return [(j, k) for j in range(n) for k in range(j + 1, n)]
    return [(0, k) for k in range(1, n)] + [(k, k + 1) for k in range(1, n - 1)]


def link_graph(tf, devices):
    """``({(j, k): {size: fetch}}, initializers)``: for each pair a sum on k of a slice read on j, per size
    (size 4: one float, the fixed cost)."""
    tf1 = tf.compat.v1
    sources, initializers = {}, []
    for j, device in enumerate(devices):
        with tf.device(device):
            var = tf1.Variable(tf.zeros([SIZES[-1] // 4]), name="link_source{}".format(j))
            initializers.append(var.initializer)
            sources[j] = (device, var)
    fetches = {}
    for j, k in link_pairs(len(devices)):
        fetches[(j, k)] = {}
        for size in (4,) + SIZES:
            with tf.device(sources[j][0]):
                piece = sources[j][1].read_value()[:size // 4]
            with tf.device(devices[k]):
                fetches[(j, k)][size] = tf.reduce_sum(piece)
    return fetches, initializers


def median_time(step, repeats):
    """The median of ``repeats`` timed calls of ``step`` after one untimed call."""
    step()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        step()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def measure_links(session, fetches, repeats=3):
    """``{(j, k): bytes per second}`` of every pair of ``link_graph``'s fetches."""
    rates = {}
    for pair, by_size in fetches.items():
        small = median_time(session.make_callable(by_size[4]), repeats)
        first = max(median_time(session.make_callable(by_size[SIZES[0]]), 1) - small, 1e-6)
        # the smallest slice that takes TARGET_S at the rate the first one suggests (the first: a lower bound)
        size = next((s for s in SIZES if s / SIZES[0] * first >= TARGET_S), SIZES[-1])
        took = median_time(session.make_callable(by_size[size]), repeats)
        rates[pair] = size / max(took - small, 1e-6)
    return rates


def node_rates(pair_rates, count):
    """``[rate of node i]`` for device indices 0 .. count - 1: the fastest pair each is in."""
    found = [0.0] * count
    for (j, k), rate in pair_rates.items():
        found[j], found[k] = max(found[j], rate), max(found[k], rate)
    return found

"""``AutoStrategy``: the plan the cost model predicts fastest, among the presets and a per-variable search.

    from autodist.strategies import AutoStrategy
    strategy = AutoStrategy().build(graph_item, resource_spec)      # an ordinary Strategy
    result = AutoStrategy().search(graph_item, resource_spec)       # and why: result.to_dict()
    # {"chosen": "PSLoadBalancing", "predicted_step_ms": 6.9,
    #  "candidates": [{"name": "PS", "predicted_step_ms": 9.1}, ..., {"name": "searched", ...}]}

Candidates: the presets ``PS``, ``PSLoadBalancing``, ``PartitionedPS``,
``AllReduce`` and ``Parallax`` with their default arguments (AllReduce priced
at each bucket size of ``BUCKET_CHOICES``, its buckets closed by bytes alone,
``FUSE_ALL``; the cheapest kept), and "searched"
(:mod:`.search`): each variable in turn, largest first, takes the cheapest of all-reduce (one
fused group), a parameter server on any CPU device with or without a local
proxy (on CPU replicas only: the model prices a proxy by the wait it spares),
or even shards on the ``k`` least loaded servers (``k`` = 2, 4, 8 ... and
every server), the others held fixed; two passes. Only the ``SEARCH_HEAD``
largest variables move one at a time; the rest (the tail: ResNet-101's
smallest batch-norm vectors, most of a 10k-variable graph) moves as one
block, all-reduced or spread over the least loaded servers (with or without
proxies), whichever is cheapest. The search runs from three
starts (PSLoadBalancing's placement, the same with proxies, everything
all-reduced; GPU replicas skip the second) and keeps the cheapest end: a node
that reads a variable (or a piece of one) from a computing CPU node waits for that node's
compute (``cost.traffic``), which one variable's move cannot undo while
others still cause it, so the search also starts where no node waits. It
prices a move by adding and taking back the variable's traffic
(``cost.traffic``), so a pass costs O(variables x options x nodes); it prices
all-reduce as collectives even in a plan that also has parameter servers,
which on several nodes the kernel relays through the chief (a global
switch a single move cannot price). Every candidate is then priced by
:func:`~autodist.strategies.cost.predict` on its written Strategy (through the
contract), relays included, and the three ends are compared so; the
cheapest preset wins (on a tie the first of ``TIE_ORDER``: PSLoadBalancing before PS, a
server per device spreading work the model does not see; on one node with two CPU devices
the two are predicted alike, and PS measured 1.13x PSLoadBalancing's ResNet50 step), and
the searched plan replaces it only when predicted at least
``SEARCH_MARGIN`` (5 %) cheaper: its mixes of parameter servers, proxies and
all-reduce are plans the benchmark has not validated as it has the presets
(on cnn a mix predicted 4 % under AllReduce measured 14 % over it), so a gain
within the model's error is not worth leaving a preset for. A mix that makes
the kernel relay its all-reduce through the chief needs ``RELAY_MARGIN``
(30 %): on 4 and 8 emulated hosts such plans measured 1.19-1.43x what the
model's error on AllReduce in the same cell allowed for (``search_margin``).

What the choice depends on, so that every node that builds gets the same plan:
the variables, the spec, and the calibration rounded to two significant digits
(:meth:`Calibration.rounded`): by default the probe's cache for the spec, else
the spec's prior. The builder never measures anything itself: a job's chief
that first plans for a cluster without a cache passes a ``measure`` function
(``autodist.runtime.calibrate.first_probe``: ``autodist calibrate`` in a child
process, 15-30 s, cached) to :meth:`job_calibration`, which calls it unless
``probe=False``; elsewhere (``autodist plan``, a member, a chief given its job
context) the cache or the prior. A job plans with its chief's: the chief ships
it with the strategy (``calibration.json`` in the job directory) and every
node that builds again (a session reopened by ``ad.function``) uses it
(:meth:`with_calibration`), whatever its own cache holds. The compute figure
is the graph's estimate (its float operations, ops and the bytes they write:
``cost.compute.estimate_compute``, a deterministic function of the graph),
not a timing; a measured ``compute`` may be passed by a caller that
builds once (``autodist plan`` reports measured predictions separately).
"""
import dataclasses
from typing import Tuple

from autodist.plan.strategy import Strategy
from autodist.strategies._arguments import check_bool
from autodist.strategies.all_reduce import DEFAULT_BUCKET_BYTES, AllReduce
from autodist.strategies.base import StrategyBuilder
from autodist.strategies.cost import Compute, cluster_calibration, predict
from autodist.strategies.cost.calibration import spec_key
from autodist.strategies import search as plan_search
from autodist.strategies.inputs import BatchStatistics, batch_statistics, builder_variables, is_cpu, replica_devices
from autodist.strategies.parallax import Parallax
from autodist.strategies.partitioned_ps import PartitionedPS
from autodist.strategies.ps import PS
from autodist.strategies.ps_load_balancing import PSLoadBalancing

__all__ = ["AutoStrategy", "AutoResult", "CANDIDATES", "FUSE_ALL", "RELAY_MARGIN", "SEARCHED", "SEARCH_MARGIN",
           "STARTS", "TIE_ORDER", "search_margin"]

#: The presets AutoStrategy prices, by name.
CANDIDATES = (("PS", PS), ("PSLoadBalancing", PSLoadBalancing), ("PartitionedPS", PartitionedPS),
              ("AllReduce", AllReduce), ("Parallax", Parallax))
#: AllReduce's bucket sizes AutoStrategy prices (the first wins a tie): smaller buckets hide under backprop
#: but their last, and pay a ring's messages each (``cost.model.last_bucket_s``). Not past the default: on
#: CPUs TensorFlow's ring moved one 100 MB tensor at twice the CPU of 16 MiB pieces, and on 2 emulated hosts one
#: 96 MiB ring stepped 1.45x four or six rings of the same bytes (docs/performance.md, phase 11): a ring's own
#: limit, which the model does not price.
BUCKET_CHOICES = (DEFAULT_BUCKET_BYTES, 4 << 20, 1 << 20)
#: AllReduce's ``chunk_size`` in the plans AutoStrategy prices and searches from: no bound on a bucket's
#: members, which close by bytes alone, as MultiWorkerMirroredStrategy's packs do. AutoDist's default of 128
#: variables splits a model of hundreds of small tensors into a ring each: on 8 emulated hosts densenet121
#: (3 rings) stepped 300.7 ms against one ring's 239.5, inception3 (2) 337.1 against 315.7 (medians of two
#: rounds that overlap, ``paper_table_buckets_8h``, docs/performance.md phase 6); one ring spares 2 (N - 1)
#: sequential messages per ring for the same bytes.
FUSE_ALL = 2 ** 31
#: Which preset wins a tie of predictions: the load-balanced servers first.
TIE_ORDER = ("PSLoadBalancing", "PS", "PartitionedPS", "AllReduce", "Parallax")
#: The name of the per-variable search's plan.
SEARCHED = "searched"
#: How much cheaper than the best preset the searched plan must be predicted to be chosen.
SEARCH_MARGIN = 0.05
#: The margin instead when the searched plan makes the kernel relay its all-reduce through the chief (parameter
#: servers and all-reduce over several nodes: ``Prediction.relayed``). On emulated clusters of 4 and 8 hosts,
#: relayed searched plans measured 1.19-1.43x (median 1.36) what the model's error on the AllReduce preset of the
#: same cell would make them (30 % covers the worst: 1 / 0.70): vgg16's, predicted 0.70-0.74x the best preset,
#: came out about even (0.86-1.05x the best builder); resnet101's (0.78x) and inception3's (0.84x) measured 1.43x
#: and 1.18x (docs/cost_model.md). Each end of the search is held to its own margin.
RELAY_MARGIN = 0.30
#: Where the search starts: PSLoadBalancing's placement, the same with local proxies, everything in the
#: search's one all-reduce group.
STARTS = (PSLoadBalancing(), PSLoadBalancing(local_proxy_variable=True),
          AllReduce(chunk_size=FUSE_ALL, bucket_bytes=None))


@dataclasses.dataclass(frozen=True)
class AutoResult:
    """The chosen plan, its name and every candidate's prediction (``(name, Prediction)``, in order);
    ``arguments``: ``(name, ((argument, value), ...))`` per preset, the arguments of the builder it was priced as
    (AllReduce's ``bucket_bytes``: the one of ``BUCKET_CHOICES`` that priced cheapest; :meth:`arguments_of`);
    the searched plan has none."""

    chosen: str
    strategy: Strategy
    candidates: Tuple[tuple, ...]
    arguments: Tuple[tuple, ...] = ()

    @property
    def prediction(self):
        return dict(self.candidates)[self.chosen]

    def arguments_of(self, name):
        """The arguments of the builder candidate ``name`` was priced as (a dict), or None (the searched plan)."""
        found = dict(self.arguments).get(name)
        return None if found is None else dict(found)

    def to_dict(self):
        """The ``"auto"`` object of ``autodist plan --format json``."""
        return {"chosen": self.chosen, "predicted_step_ms": round(self.prediction.step_s * 1e3, 4),
                "candidates": [{"name": name, "predicted_step_ms": round(p.step_s * 1e3, 4),
                                "comm_share": round(p.comm_share, 4), "relayed": p.relayed,
                                "arguments": self.arguments_of(name)}
                               for name, p in self.candidates]}


class AutoStrategy(StrategyBuilder):
    """The preset with the smallest predicted step time, or the searched plan when it is predicted at
    least ``SEARCH_MARGIN`` cheaper still (``RELAY_MARGIN`` when it relays; see the module docstring).

    ``calibration``: a :class:`~autodist.strategies.cost.Calibration` (default:
    the cached probe of the spec; without one, what a job's chief measures when
    it launches the job, else the spec's prior; ``probe=False``: never measured).
    ``compute``: a
    :class:`~autodist.strategies.cost.Compute` of one replica's step (default:
    estimated from the graph at ``batch`` examples: ``cost.compute.estimate_compute``).
    """

    def __init__(self, calibration=None, compute=None, batch=32, probe=True):
        check_bool("AutoStrategy", "probe", probe)
        self._calibration = calibration
        self._compute = compute
        self._batch = batch
        self._probe = probe
        self._planned = {}   # spec key -> the calibration planning found for it

    def build(self, graph_item, resource_spec):
        return self.search(graph_item, resource_spec).strategy

    def search(self, graph_item, resource_spec):
        """The :class:`AutoResult` for a captured graph."""
        calibration = self.calibration(resource_spec)
        compute = self._compute
        if compute is None:
            from autodist.strategies.cost.compute import estimate_compute
            compute = estimate_compute(graph_item, calibration, self._batch)
        return self.search_variables(builder_variables(graph_item), resource_spec, compute, calibration,
                                     batch_statistics(graph_item))

    def build_from_variables(self, variables, resource_spec):
        """The chosen Strategy for a ``BuilderVariable`` list, as every variable builder offers."""
        return self.search_variables(variables, resource_spec, self._compute).strategy

    def calibration(self, resource_spec):
        """The rounded calibration the search uses on ``resource_spec``."""
        return self.job_calibration(resource_spec).rounded()

    def job_calibration(self, resource_spec, measure=None):
        """The calibration given, else what ``measure(resource_spec)`` finds when a chief about to launch a
        job passes it (and ``probe``), else the probe's cache for ``resource_spec``, else the spec's prior."""
        if self._calibration is not None:
            return self._calibration
        key = spec_key(resource_spec)
        if key in self._planned:   # kept per cluster: a failed probe is not tried again at every build
            return self._planned[key]
        found = measure(resource_spec) if measure is not None and self._probe else cluster_calibration(resource_spec)
        if measure is not None or found.source == "probe":
            self._planned[key] = found
        return found

    def with_calibration(self, calibration):
        """The same search with ``calibration`` (a job ships the chief's to every node)."""
        return AutoStrategy(calibration=calibration, compute=self._compute, batch=self._batch, probe=self._probe)

    def search_variables(self, variables, resource_spec, compute=None, calibration=None, statistics=None):
        """The :class:`AutoResult` for a ``BuilderVariable`` list (no graph needed); ``statistics``: the graph's
        synchronized batch norm (``inputs.BatchStatistics``), whose exchanges a plan with parameter servers
        across nodes relays through the chief."""
        variables = list(variables)
        calibration = calibration or self.calibration(resource_spec)
        compute = compute or Compute(0.0, source="none")
        statistics = statistics or BatchStatistics()

        def price(name, strategy, builder=None):
            return name, strategy, predict(strategy, variables, compute, calibration, chief=resource_spec.chief,
                                           statistics=statistics), builder

        cpu_replicas = any(is_cpu(replica) for replica in replica_devices(resource_spec))
        starts = STARTS if cpu_replicas else STARTS[:1] + STARTS[2:]   # no node waits on GPUs: no proxies
        ends = [price(SEARCHED, plan_search.Search(variables, resource_spec, compute, calibration, start,
                                                   proxies=cpu_replicas, statistics=statistics).run())
                for start in starts]
        presets = [min((price(name, builder.build_from_variables(variables, resource_spec), builder)
                        for builder in _preset_builders(name, cls)), key=lambda p: round(p[2].step_s, 9))
                   for name, cls in CANDIDATES]
        best = min(range(len(presets)), key=lambda i: (round(presets[i][2].step_s, 9), _tie_rank(presets[i][0], i)))
        # each end against its own margin (a relayed end that misses 30 % must not hide one that clears 5 %);
        # the cheapest end that clears it, else the cheapest end (the first on a tie), shown as the candidate
        cleared = [end for end in ends if round(end[2].step_s, 9)
                   <= round((1.0 - search_margin(end[2])) * presets[best][2].step_s, 9)]
        priced = presets + [min(cleared or ends, key=lambda end: round(end[2].step_s, 9))]
        if cleared:
            best = len(priced) - 1
        return AutoResult(priced[best][0], priced[best][1], tuple((name, p) for name, _, p, _ in priced),
                          tuple((name, tuple(builder.arguments.items())) for name, _, _, builder in presets))

    def __repr__(self):
        return "AutoStrategy(batch={!r}{})".format(self._batch, "" if self._probe else ", probe=False")


def search_margin(prediction):
    """How much cheaper than the best preset the searched plan of ``prediction`` must be predicted to be chosen:
    ``RELAY_MARGIN`` when the kernel relays its all-reduce through the chief, else ``SEARCH_MARGIN``."""
    return RELAY_MARGIN if prediction.relayed else SEARCH_MARGIN


def _tie_rank(name, index):
    """A preset's place in a tie: its place in ``TIE_ORDER``, else after them in ``CANDIDATES``' order."""
    return TIE_ORDER.index(name) if name in TIE_ORDER else len(TIE_ORDER) + index


def _preset_builders(name, cls):
    """The builders a preset is priced as: AllReduce at each of ``BUCKET_CHOICES`` (members unbounded,
    ``FUSE_ALL``), the others as they are."""
    if cls is AllReduce:
        return [AllReduce(chunk_size=FUSE_ALL, bucket_bytes=size) for size in BUCKET_CHOICES]
    return [cls()]

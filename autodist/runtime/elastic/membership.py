"""Which nodes an attempt of an elastic job runs on: the spec's candidates, what is found, what is set aside.

The resource spec lists the nodes that may take part, each with its
settings, and may give a ``node_template``: the settings of any other host
the discovery script finds (a new cloud instance or pod). The script says
which are available now (without one, every node of the spec is). A node is
left out while it is set aside::

    Membership(spec, min_nodes, max_nodes, backoff)
    wanted(found, now)        the chief, then the found candidates in spec order (then the hosts the
                              template admits, in the script's order), at most max_nodes, none that is
                              set aside; the other found addresses (no template), and a host given more
                              slots than it has devices, are reported once
    set_aside(address, why)   out for backoff * 2^(failures-1) s (at most MAX_BACKOFF_FACTOR * backoff),
                              then tried again; a node that keeps failing waits longer each time
    nodes_spec(nodes, slots)  the spec of just those nodes, each with the GPUs (or CPUs) its slots allow
    with_hosts(spec, hosts)   the spec with a node made from its template for each host it does not list

The chief is always a member: it is the machine the job is run from.
"""
import dataclasses
import time

from autodist.errors import PreflightError, ResourceSpecError
from autodist.runtime.recovery.shrink import restricted

__all__ = ["Membership", "MAX_BACKOFF_FACTOR", "nodes_spec", "unfit_hosts", "replica_count", "with_hosts"]

MAX_BACKOFF_FACTOR = 16
_SHOWN = 3   # unknown hosts named in the one line that reports them


@dataclasses.dataclass
class _Record:
    failures: int = 0
    until: float = 0.0
    reason: str = ""


class Membership:
    """The candidates of one elastic job and their back-off (see the module docstring)."""

    def __init__(self, spec, min_nodes, max_nodes, backoff, say):
        self.spec = spec
        self.min_nodes = min_nodes
        self.max_nodes = max_nodes   # None: no limit (a spec with a node template)
        self.backoff = backoff
        self._say = say
        self._records = {}
        self._reported = set()
        self._nodes = {n.address: n for n in spec.node_specs}   # and the template's, once made (None: refused)

    def candidates(self, found=None):
        """The spec's nodes, then the ``found`` hosts it does not list when its template admits them."""
        listed = [n.address for n in self.spec.node_specs]
        if self.spec.node_template is None or not found:
            return listed
        return listed + [a for a in found if a not in listed and self._node(a) is not None]

    def _node(self, address):
        """``address``'s NodeSpec: listed, or made from the template (once; None, said once, when refused)."""
        if address not in self._nodes:
            try:
                self._nodes[address] = {n.address: n for n in with_hosts(self.spec, [address]).node_specs}[address]
            except ResourceSpecError as e:
                self._nodes[address] = None
                self._reported.add(address)   # not again among the hosts that are no nodes of the spec
                self._say("elastic: {} cannot join through the node template of {}: {}; it is left out".format(
                    address, self.spec.path, e.problem))
        return self._nodes[address]

    def set_aside(self, address, reason, now=None):
        """Leave ``address`` out for its back-off; returns the seconds it is out."""
        now = time.monotonic() if now is None else now
        record = self._records.setdefault(address, _Record())
        record.failures += 1
        seconds = min(self.backoff * 2 ** (record.failures - 1), self.backoff * MAX_BACKOFF_FACTOR)
        record.until, record.reason = now + seconds, reason
        self._say("elastic: {} set aside for {:g} s (failure {}: {})".format(
            address, seconds, record.failures, reason.splitlines()[0]))
        return seconds

    def is_aside(self, address, now=None):
        record = self._records.get(address)
        return record is not None and (time.monotonic() if now is None else now) < record.until

    def retried(self, address):
        """Whether ``address`` was set aside before (and is tried again now)."""
        return address in self._records

    def wanted(self, found, now=None):
        """The addresses to run on, given ``found`` ({address: slots}; None: every candidate)."""
        chief = self.spec.chief
        candidates = self.candidates(found)
        if found is not None:
            self._report_unknown(found, candidates)
        nodes = [chief]
        for address in candidates:
            if address == chief or (found is not None and address not in found) or self.is_aside(address, now):
                continue
            full = self.max_nodes is not None and len(nodes) >= self.max_nodes
            if not full and self._slots_fit(address, (found or {}).get(address)):
                nodes.append(address)
        return nodes

    def _slots_fit(self, address, slots):
        """Whether the spec gives ``address`` at least ``slots`` devices (said once when it does not)."""
        node = self._node(address)
        devices = ("gpus", node.gpus) if node.gpus else ("cpus", node.cpus)
        if slots is None or slots <= len(devices[1]):
            return True
        if (address, slots) not in self._reported:
            self._reported.add((address, slots))
            self._say("elastic: the discovery script gives {} {} slots, but {} lists {} {} for it; it is left "
                      "out".format(address, slots, self.spec.path, len(devices[1]), devices[0]))
        return False

    def _report_unknown(self, found, candidates):
        """One line for the hosts found that are no node of the spec (a thousand hosts are not a thousand lines)."""
        new = sorted(set(found) - set(candidates) - self._reported)
        if new:
            self._reported.update(new)
            more = " and {} more".format(len(new) - _SHOWN) if len(new) > _SHOWN else ""
            self._say("elastic: the discovery script lists {} host(s) that are not nodes of {} ({}{}); they are left "
                      "out: add them to the spec's nodes (with their settings), or give the spec a node_template "
                      "to let any host join".format(len(new), self.spec.path, ", ".join(new[:_SHOWN]), more))
        if self.spec.chief not in found and self.spec.chief not in self._reported:
            self._reported.add(self.spec.chief)
            self._say("elastic: the discovery script does not list the chief {}; it stays in the job (the job is "
                      "run from it)".format(self.spec.chief))


def with_hosts(spec, addresses):
    """``spec`` with a node of its ``node_template``'s settings for each of ``addresses`` it does not list, after
    its own nodes (checked as any spec); ``spec`` itself when it lists them all or has no template."""
    listed = {n.address for n in spec.node_specs}
    missing = [a for a in dict.fromkeys(addresses) if a not in listed]
    if not missing or spec.node_template is None:
        return spec
    from autodist.spec.resource_spec import ResourceSpec
    data = spec.to_dict()
    data["nodes"] += [dict(spec.node_template, address=address) for address in missing]
    return ResourceSpec.from_dict(data, path=spec.path)


def nodes_spec(spec, nodes, slots=None):
    """``spec`` with the nodes ``nodes`` only, each with the first ``slots[address]`` of its GPUs (or CPUs)."""
    smaller = restricted(with_hosts(spec, nodes), nodes)
    limits = {a: n for a, n in (slots or {}).items() if n and a in nodes}
    if not limits:
        return smaller
    from autodist.spec.resource_spec import ResourceSpec
    data = smaller.to_dict()
    for node in data["nodes"]:
        count = limits.get(node["address"])
        if count is None:
            continue
        key = "gpus" if node.get("gpus") else "cpus"
        if count > len(node[key]):
            raise PreflightError({node["address"]: "the discovery script gives it {} slots, but the spec lists {} "
                                                   "{}".format(count, len(node[key]), key)})
        node[key] = node[key][:count]
    return ResourceSpec.from_dict(data, path=spec.path)


def replica_count(spec):
    """The replicas of ``spec``: every node's GPUs, or its listed CPUs when it has none."""
    gpus, cpus = spec.node_gpu_devices, spec.node_cpu_devices
    return sum(len(gpus.get(n.address) or cpus[n.address]) for n in spec.node_specs)


def unfit_hosts(spec, addresses, timeout=60.0, python="python3", runner_factory=None):
    """{address: problem} of the remote ``addresses`` that fail preflight (loopback nodes have none to fail)."""
    from autodist.runner import LocalRunner
    from autodist.runner.preflight import local_versions, preflight
    if runner_factory is None:
        from autodist.runtime.launch.node import default_runner as runner_factory
    spec = with_hosts(spec, addresses)
    nodes = {n.address: n for n in spec.node_specs}
    runners = [runner_factory(nodes[a], spec) for a in addresses if a != spec.chief]
    remote = [r for r in runners if not isinstance(r, LocalRunner)]
    try:
        if remote:
            preflight(remote, local_versions(), timeout=timeout, python=python)
    except PreflightError as e:
        return dict(e.failures)
    finally:
        for runner in runners:
            runner.close()
    return {}

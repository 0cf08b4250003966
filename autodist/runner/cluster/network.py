"""The cluster's network: namespaces, a bridge, veth pairs and ``tc tbf`` rate limits, as ``ip``/``tc`` argv lists.

    make_switch(names)                   ip netns add autodist-NAME-sw; bridge br0 up
    add_node(names, i, rate)             ip netns add autodist-NAME-i; veth n<i> (switch) <-> eth0 (node);
                                         10.77.0.<i+1>/24 on eth0; tbf on both ends
    shape(names, i, rate)                tc qdisc replace ... tbf on eth0 (upload) and n<i> (download)
    set_link(names, i, up)               the switch's port n<i> down / up: a cable pulled at the switch
    remove(names)                        every process left in the namespaces (by pid), then the namespaces

Every command runs with a time limit; a failure raises ``ClusterError`` with
the command and what it printed. A veth pair is created straight into the
two namespaces it joins, so no interface ever appears in the machine's own
namespace, and deleting a namespace deletes its end of each pair (and with it
the other end, its qdiscs and the bridge).
"""
import os
import re
import signal
import subprocess
import time

from autodist.errors import ArgumentError, ClusterError

__all__ = ["MAX_RATE", "parse_rate", "format_rate", "make_switch", "add_node", "shape", "set_link", "link_state",
           "namespaces", "remove", "stop_processes", "run_tool", "KILL_WAIT"]

COMMAND_TIMEOUT = 30.0
KILL_WAIT = 5.0          # s for a process in a namespace to go after SIGTERM, and again after SIGKILL
QUEUE_LATENCY = "50ms"   # the most a packet may wait in a tbf queue before it is dropped
_RATE = re.compile(r"(\d+(?:\.\d+)?)\s*([kmgt]?)(bit)?\Z", re.IGNORECASE)
_SCALE = {"": 1, "k": 10 ** 3, "m": 10 ** 6, "g": 10 ** 9, "t": 10 ** 12}
_TOOLS = {"ip": "iproute2", "tc": "iproute2"}
#: The fastest link ``up`` and ``link ... rate`` make: veth pairs of one machine move a few Gbit/s, and tc's
#: token bucket (10 ms of traffic, ``_tbf``) overflows its 32 bits beyond about 3.4 Tbit/s.
MAX_RATE = 100 * 10 ** 9


def parse_rate(text):
    """Bits per second of a rate in tc's notation: ``1gbit``, ``200mbit``, ``2.5gbit``, ``500kbit``."""
    match = _RATE.match(str(text).strip())
    if not match or float(match.group(1)) <= 0:
        hint = " (tc's 'bps' means bytes per second; write bits, e.g. 800mbit)" if "bps" in str(text).lower() else ""
        raise ArgumentError("rate {!r}: expected a positive number of bits per second such as 1gbit, 200mbit or "
                            "500kbit{}".format(text, hint))
    bits = int(float(match.group(1)) * _SCALE[match.group(2).lower()])
    if bits < 8000:
        raise ArgumentError("rate {!r}: at least 8kbit (a slower link cannot carry an SSH session)".format(text))
    if bits > MAX_RATE:
        raise ArgumentError("rate {!r}: at most {} (links between namespaces of one machine move a few Gbit/s; "
                            "tc's token bucket overflows beyond about 3.4 Tbit/s)".format(text, format_rate(MAX_RATE)))
    return bits


def format_rate(bits):
    """``1 Gbit/s``, ``200 Mbit/s``: a rate in bits per second for people."""
    for unit, scale in (("Gbit/s", 10 ** 9), ("Mbit/s", 10 ** 6), ("kbit/s", 10 ** 3)):
        if bits >= scale:
            return "{:g} {}".format(round(bits / scale, 3), unit)
    return "{} bit/s".format(bits)


def run_tool(argv, what, timeout=COMMAND_TIMEOUT, check=True):
    """Run ``argv`` (an ``ip``/``tc``/``ssh-keygen`` command); ``(exit code, stdout)``; ClusterError on failure."""
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise ClusterError("{}: {!r} not found; install {}".format(
            what, argv[0], _TOOLS.get(argv[0], "it"))) from None
    except subprocess.TimeoutExpired:
        raise ClusterError("{}: {} did not finish within {:.0f} s".format(what, " ".join(argv), timeout)) from None
    if check and done.returncode != 0:
        raise ClusterError("{}: {} failed (exit code {}): {}".format(
            what, " ".join(argv), done.returncode, (done.stderr or done.stdout).strip()[-500:] or "no output"))
    return done.returncode, done.stdout


def _ip(names, what, *args, namespace=None):
    argv = ["ip"] + (["-n", namespace] if namespace else []) + list(args)
    return run_tool(argv, "cluster {!r}: {}".format(names.name, what))


def make_switch(names):
    """The switch's namespace with its bridge, up."""
    _ip(names, "make the switch's namespace", "netns", "add", names.switch)
    _ip(names, "make the bridge", "link", "add", names.bridge, "type", "bridge", namespace=names.switch)
    for link in ("lo", names.bridge):
        _ip(names, "bring {} up in the switch".format(link), "link", "set", link, "up", namespace=names.switch)


def add_node(names, index, rate):
    """Node ``index``: its namespace, its veth pair to the switch, its address, both ends shaped to ``rate`` bit/s."""
    namespace, port = names.namespace(index), names.port(index)
    _ip(names, "make node {}'s namespace".format(index), "netns", "add", namespace)
    _ip(names, "make node {}'s link".format(index), "link", "add", port, "type", "veth", "peer", "name",
        names.node_link, "netns", namespace, namespace=names.switch)
    _ip(names, "attach node {} to the bridge".format(index), "link", "set", port, "master", names.bridge,
        namespace=names.switch)
    _ip(names, "address node {}".format(index), "addr", "add", names.cidr(index), "dev", names.node_link,
        namespace=namespace)
    for link, where in (("lo", namespace), (names.node_link, namespace), (port, names.switch)):
        _ip(names, "bring node {}'s {} up".format(index, link), "link", "set", link, "up", namespace=where)
    shape(names, index, rate)


def _tbf(rate):
    burst = max(32 * 1024, rate // 8 // 100)   # 10 ms at the rate: enough for a timer tick at 1 Gbit/s
    return ["tbf", "rate", "{}bit".format(rate), "burst", "{}b".format(burst), "latency", QUEUE_LATENCY]


def shape(names, index, rate):
    """Limit node ``index``'s link to ``rate`` bit/s each way: its upload on eth0, its download on the switch's port."""
    for where, link in ((names.namespace(index), names.node_link), (names.switch, names.port(index))):
        run_tool(["tc", "-n", where, "qdisc", "replace", "dev", link, "root"] + _tbf(rate),
                 "cluster {!r}: shape node {}'s link".format(names.name, index))


def set_link(names, index, up):
    """Cut (``up=False``) or restore node ``index``'s link at the switch; the node's own side stays as it is."""
    _ip(names, "{} node {}'s link".format("restore" if up else "cut", index), "link", "set", names.port(index),
        "up" if up else "down", namespace=names.switch)


def link_state(names, index):
    """``"up"`` or ``"down"``: node ``index``'s port on the switch, as set by ``set_link``."""
    _, out = _ip(names, "read node {}'s link".format(index), "-o", "link", "show", names.port(index),
                 namespace=names.switch)
    flags = re.search(r"<([^>]*)>", out)
    return "up" if flags and "UP" in flags.group(1).split(",") else "down"


def namespaces(names):
    """This cluster's namespaces that exist now (the switch's last)."""
    code, out = run_tool(["ip", "netns", "list"], "list network namespaces", check=False)
    found = [line.split()[0] for line in out.splitlines() if line.strip()] if code == 0 else []
    ours = [ns for ns in found if names.index_of_namespace(ns) is not None]
    return sorted(ours, key=lambda ns: (ns == names.switch, ns))


def _pids_in(namespace):
    code, out = run_tool(["ip", "netns", "pids", namespace], "list the processes in " + namespace, check=False)
    return [int(p) for p in out.split() if p.isdigit()] if code == 0 else []


def _alive(pid):
    try:
        with open("/proc/{}/stat".format(pid), "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except OSError:
        return False


def _stop(pids, sig):
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + KILL_WAIT
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if _alive(p)]


def stop_processes(namespace):
    """End every process inside ``namespace`` (by pid: each was started in the cluster); the pids that stayed."""
    pids = [p for p in _pids_in(namespace) if p != os.getpid()]
    left = _stop(pids, signal.SIGTERM) if pids else []
    return _stop(left, signal.SIGKILL) if left else []


def remove(names):
    """Remove the cluster's namespaces, each after the processes in it; ``(removed, [unkillable pids])``."""
    removed, stuck = [], []
    for namespace in namespaces(names):
        stuck += stop_processes(namespace)
        run_tool(["ip", "netns", "del", namespace], "cluster {!r}: remove namespace {}".format(names.name, namespace))
        removed.append(namespace)
    return removed, stuck

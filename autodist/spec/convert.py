"""Resource specs from what cluster schedulers already know: TF_CONFIG and Slurm's variables.

    spec_from_tf_config('{"cluster": {"chief": ["a:2222"], "worker": ["b:2222"]}, ...}',
                        gpus_per_node=2, ssh={"username": "me"})
    spec_from_slurm({"SLURM_JOB_NODELIST": "gpu[01-03]", "SLURM_GPUS_ON_NODE": "4"},
                    ssh={"username": "me"})
    expand_hostlist("gpu[01-03,07],cpu5")   # ['gpu01', 'gpu02', 'gpu03', 'gpu07', 'cpu5']

Each returns plain data shaped like the YAML (``ResourceSpec.from_dict``
accepts it): one node per distinct host, the chief first. Every node that is
neither the chief nor a loopback address is reached through one ssh group,
``cluster``, made of the ``ssh`` fields given. Malformed input raises
``ResourceSpecError`` naming the variable and the offending part. Pure
functions: the environment is passed in, never read here.

Sizes are checked before anything is expanded, against the spec's own
limits (``schema.MAX_NODES`` hosts, ``schema.MAX_DEVICES`` GPUs per node):
``n[0-99999999999999999999]``, ``2(x100000000)`` or ``SLURM_GPUS_ON_NODE=100000000``
are refused in microseconds, not after gigabytes. A TF_CONFIG nested too deeply
for the JSON parser is refused the same way.
"""
import json
import re

from autodist.spec.rules import address_problem, canonical_address, is_loopback
from autodist.spec.schema import MAX_DEVICES, MAX_NODES
from autodist.errors import ResourceSpecError

__all__ = ["spec_from_tf_config", "spec_from_slurm", "expand_hostlist", "expand_counts", "parse_tf_config",
           "checked_gpus", "SSH_GROUP_NAME"]

SSH_GROUP_NAME = "cluster"
TASK_TYPES = ("chief", "master", "worker", "ps", "evaluator")
_RANGE = re.compile(r"([0-9]+)(?:-([0-9]+))?\Z")
_GPU_COUNT = re.compile(r"(?:[A-Za-z0-9_.-]+:)*([0-9]+)\Z")
_REPEATED = re.compile(r"([0-9]+)(?:\(x([0-9]+)\))?\Z")


def _error(source, key, problem):
    return ResourceSpecError(problem, path=source, key=key)


def _host_of(entry, source, key):
    """``"host:port"`` / ``"[v6]:port"`` -> host."""
    if not isinstance(entry, str):
        raise _error(source, key, "expected a \"host:port\" string, got {!r}".format(entry))
    match = re.fullmatch(r"\[([^\]]+)\]:([0-9]+)|([^:\[\]]+):([0-9]+)", entry.strip())
    if match is None:
        raise _error(source, key, "expected \"host:port\" (IPv6: \"[addr]:port\"), got {!r}".format(entry))
    host, port = match.group(1) or match.group(3), int(match.group(2) or match.group(4))
    if not 1 <= port <= 65535:   # 0 would be any free port, which no other task can know; more wraps around
        raise _error(source, key, "port {} of {!r} is not a TCP port (1 to 65535)".format(port, entry))
    problem = address_problem(host)
    if problem:
        raise _error(source, key, problem)
    return host


def parse_tf_config(text, source="TF_CONFIG"):
    """``{task type: [hosts]}`` of a TF_CONFIG JSON text, checked."""
    if text is None or not str(text).strip():
        raise _error(source, None, "is empty or not set; set the TF_CONFIG environment variable (the "
                                   "training operator does) or pass --tf-config JSON")
    try:
        config = json.loads(text)
    except ValueError as e:
        raise _error(source, None, "not valid JSON: {}".format(e)) from None
    except RecursionError:
        raise _error(source, None, "nested too deeply to read (TF_CONFIG is {\"cluster\": {\"worker\": "
                                   "[\"host:port\", ...]}, \"task\": {...}}, two or three levels)") from None
    if not isinstance(config, dict) or not isinstance(config.get("cluster"), dict):
        raise _error(source, "cluster", "missing: TF_CONFIG is {\"cluster\": {\"worker\": [\"host:port\", "
                                        "...], ...}, \"task\": {...}}")
    hosts = {}
    for kind, entries in config["cluster"].items():
        key = "cluster.{}".format(kind)
        if kind not in TASK_TYPES:
            raise _error(source, key, "unknown task type; expected one of {}".format(", ".join(TASK_TYPES)))
        if not isinstance(entries, list):
            raise _error(source, key, "expected a list of \"host:port\" strings, got {!r}".format(entries))
        hosts[kind] = [_host_of(e, source, "{}[{}]".format(key, i)) for i, e in enumerate(entries)]
    return hosts


def _distinct(hosts):
    seen, result = set(), []
    for host in hosts:
        if canonical_address(host) not in seen:
            seen.add(canonical_address(host))
            result.append(host)
    return result


def _build(hosts, gpus, ssh, name, cpu_only=(), threads=None):
    """Spec data: ``hosts[0]`` is the chief; ``cpu_only`` hosts get no GPUs; ``threads``: {host: count}."""
    nodes, remote = [], False
    cpu_only = {canonical_address(h) for h in cpu_only}
    for i, host in enumerate(hosts):
        node = {"address": host, "gpus": [] if canonical_address(host) in cpu_only else list(range(gpus))}
        if threads:
            node["threads"] = threads[host]
        if i == 0:
            node["chief"] = True
        elif not is_loopback(host):
            node["ssh_config"] = SSH_GROUP_NAME
            remote = True
        nodes.append(node)
    data = {"name": name, "nodes": nodes}
    if remote:
        data["ssh"] = {SSH_GROUP_NAME: dict(ssh or {})}
    return data


def spec_from_tf_config(text, gpus_per_node=0, ssh=None, include_ps=False, source="TF_CONFIG"):
    """Spec data for the cluster of a TF_CONFIG (JSON text).

    The chief is the ``chief`` (or legacy ``master``) task, else worker 0;
    then the workers' hosts, then, with ``include_ps``, the parameter
    servers' hosts as CPU-only nodes. Evaluators do not train and are left
    out. TF_CONFIG says nothing about GPUs: every node gets
    ``gpus_per_node``. Several tasks on one host make one node.
    """
    hosts = parse_tf_config(text, source)
    chiefs = hosts.get("chief", []) + hosts.get("master", [])
    if len(chiefs) > 1:
        raise _error(source, "cluster.chief", "has {} tasks; a cluster has at most one chief".format(len(chiefs)))
    workers = hosts.get("worker", [])
    if not chiefs and not workers:
        raise _error(source, "cluster", "has no chief and no worker task: nothing would train")
    ps = hosts.get("ps", []) if include_ps else []
    ordered = _distinct(chiefs + workers + ps)
    trainers = {canonical_address(h) for h in chiefs + workers}
    cpu_only = [h for h in ps if canonical_address(h) not in trainers]
    return _build(ordered, checked_gpus(gpus_per_node, "--gpus-per-node"), ssh, "from-tf-config", cpu_only=cpu_only)


def _too_many(count, text, source):
    return _error(source, None, "{!r} names {} hosts; a resource spec has at most {} nodes".format(
        text if len(text) <= 80 else text[:77] + "...", count, MAX_NODES))


def _expand_piece(piece, source, room):
    """One comma-free host expression with any number of ``[...]`` groups -> hosts; more than ``room`` is
    refused before any is made."""
    groups = _bracket_groups(piece, source)
    count = 1
    for values in groups:
        count *= sum(high - low + 1 for low, high, _ in values)
        if count > room:
            raise _too_many(count, piece, source)
    results = [""]
    rest = piece
    for values in groups:
        start = rest.find("[")
        prefix, rest = rest[:start], rest[rest.find("]", start) + 1:]
        texts = [str(n).zfill(width) for low, high, width in values for n in range(low, high + 1)]
        results = [r + prefix + v for r in results for v in texts]
    return [r + rest for r in results]


def _bracket_groups(piece, source):
    """The ``[...]`` groups of ``piece``, each as ``[(low, high, zero-padded width), ...]``, checked."""
    groups = []
    rest = piece
    while rest:
        start = rest.find("[")
        if start < 0:
            if "]" in rest:
                raise _error(source, None, "unbalanced ']' in {!r}".format(piece))
            break
        end = rest.find("]", start)
        if end < 0:
            raise _error(source, None, "unbalanced '[' in {!r}".format(piece))
        prefix, body, rest = rest[:start], rest[start + 1:end], rest[end + 1:]
        if "]" in prefix or "[" in body:
            raise _error(source, None, "unbalanced brackets in {!r}".format(piece))
        values = []
        for item in body.split(","):
            match = _RANGE.match(item.strip())
            if match is None:
                raise _error(source, None, "bad range {!r} in {!r}: expected N or N-M with digits".format(
                    item, piece))
            low, high = match.group(1), match.group(2) or match.group(1)
            if int(high) < int(low):
                raise _error(source, None, "range {!r} in {!r} counts down".format(item, piece))
            width = len(low) if low.startswith("0") and len(low) > 1 else 1
            values.append((int(low), int(high), width))
        groups.append(values)
    return groups


def expand_hostlist(text, source="SLURM_JOB_NODELIST"):
    """Slurm's compressed host list -> host names, in order, duplicates dropped.

    ``gpu[01-03,07],cpu5`` gives gpu01 gpu02 gpu03 gpu07 cpu5; zero padding is
    kept and several bracket groups in one name multiply
    (``rack[1-2]-n[1-2]``: rack1-n1 rack1-n2 rack2-n1 rack2-n2).
    """
    if text is None or not text.strip():
        raise _error(source, None, "is empty or not set; run inside a Slurm allocation (salloc/sbatch/srun)")
    pieces, depth, current = [], 0, ""
    for char in text.strip():
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise _error(source, None, "unbalanced ']' in {!r}".format(text))
        if char == "," and depth == 0:
            pieces.append(current)
            current = ""
        else:
            current += char
    if depth != 0:
        raise _error(source, None, "unbalanced '[' in {!r}".format(text))
    pieces.append(current)
    if len(pieces) > MAX_NODES:
        raise _too_many(len(pieces), text, source)
    hosts = []
    for piece in pieces:
        if not piece.strip():
            raise _error(source, None, "empty host name in {!r}".format(text))
        hosts.extend(_expand_piece(piece.strip(), source, MAX_NODES - len(hosts)))
    for host in hosts:
        problem = address_problem(host)
        if problem:
            raise _error(source, None, problem)
    return _distinct(hosts)


def _gpu_count(environ):
    """GPUs per node from Slurm's variables (or CUDA_VISIBLE_DEVICES), 0 if none says."""
    for name in ("SLURM_GPUS_ON_NODE", "SLURM_JOB_GPUS", "SLURM_GPUS_PER_NODE"):
        value = environ.get(name)
        if value is None or not value.strip():
            continue
        if name == "SLURM_JOB_GPUS":   # the GPU ids of this node: "0,1,3"
            return checked_gpus(len([g for g in value.split(",") if g.strip()]), name)
        counts = []
        for part in value.split(","):
            match = _GPU_COUNT.match(part.strip())
            if match is None:
                raise _error(name, None, "expected a GPU count such as '4' or 'a100:4', got {!r}".format(value))
            counts.append(int(match.group(1)))
        return checked_gpus(sum(counts), name)
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() and visible.strip() != "NoDevFiles":
        return checked_gpus(len([d for d in visible.split(",") if d.strip()]), "CUDA_VISIBLE_DEVICES")
    return 0


def checked_gpus(count, source):
    """``count`` GPUs of every node, checked against the spec's limit before any list of them is made."""
    if count > MAX_DEVICES:
        raise _error(source, None, "{} GPUs per node; a resource spec has at most {} devices per node".format(
            count, MAX_DEVICES))
    return count


def expand_counts(text, count, source="SLURM_JOB_CPUS_PER_NODE"):
    """Slurm's per-node counts, ``2(x3),1`` -> ``[2, 2, 2, 1]``; there must be ``count`` of them."""
    parts = []
    for part in (text or "").split(","):
        match = _REPEATED.match(part.strip())
        if match is None:
            raise _error(source, None, "expected counts such as '4' or '2(x3),1', got {!r}".format(text))
        parts.append((int(match.group(1)), int(match.group(2) or 1)))
    given = sum(times for _, times in parts)   # counted before any list is made: 2(x100000000) is cheap
    if given != count:
        raise _error(source, None, "{!r} gives {} node(s) but the allocation has {}".format(text, given, count))
    return [value for value, times in parts for _ in range(times)]


def _chief_first(hosts, environ, source):
    """``hosts`` with the node this process runs on (``SLURMD_NODENAME``, if set) first."""
    here = environ.get("SLURMD_NODENAME")
    if not here:
        return hosts
    if here not in hosts:
        raise _error("SLURMD_NODENAME", None, "this node, {!r}, is not in the allocation's {} ({}); run autodist "
                                              "on a node of the allocation".format(here, source, " ".join(hosts)))
    return [here] + [h for h in hosts if h != here]


def spec_from_slurm(environ, ssh=None, gpus_per_node=None):
    """Spec data for the Slurm allocation described by ``environ`` (a mapping).

    Hosts come from ``SLURM_JOB_NODELIST`` (or ``SLURM_NODELIST``); the chief
    is the node this runs on (``SLURMD_NODENAME``), else the first host.
    Each node's ``threads`` is its CPU count in ``SLURM_JOB_CPUS_PER_NODE``
    (``2(x3),1``: three nodes of 2, one of 1), when set. GPUs per node:
    ``gpus_per_node`` if given, else ``SLURM_GPUS_ON_NODE``, the ids in
    ``SLURM_JOB_GPUS``, ``SLURM_GPUS_PER_NODE`` or the number of
    ``CUDA_VISIBLE_DEVICES`` entries; TensorFlow numbers the visible GPUs
    0..n-1 whatever their physical ids.
    """
    source = "SLURM_JOB_NODELIST" if environ.get("SLURM_JOB_NODELIST") else "SLURM_NODELIST"
    hosts = expand_hostlist(environ.get(source), source)
    expected = environ.get("SLURM_JOB_NUM_NODES") or environ.get("SLURM_NNODES")
    if expected is not None and expected.strip().isdigit() and int(expected) != len(hosts):
        raise _error(source, None, "lists {} host(s) but SLURM_JOB_NUM_NODES is {}".format(len(hosts), expected))
    cpus = environ.get("SLURM_JOB_CPUS_PER_NODE")
    threads = dict(zip(hosts, expand_counts(cpus, len(hosts)))) if cpus and cpus.strip() else None
    gpus = _gpu_count(environ) if gpus_per_node is None else checked_gpus(gpus_per_node, "--gpus-per-node")
    return _build(_chief_first(hosts, environ, source), gpus, ssh, "from-slurm", threads=threads)

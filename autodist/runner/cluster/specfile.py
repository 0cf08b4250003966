"""The resource spec of an emulated cluster: node 0 the chief, every other node over SSH with this Python.

    nodes:
      - {address: 10.77.0.1, chief: true, network_bandwidth: 1.0}
      - {address: 10.77.0.2, ssh_config: cluster, network_bandwidth: 1.0}
    ssh:
      cluster:
        username: root
        key_file: ~/.autodist/clusters/NAME/client_ed25519
        known_hosts_file: ~/.autodist/clusters/NAME/known_hosts
        python_venv: export PATH=/path/of/this/python:<this machine's PATH>
        shared_envs: {PYTHONPATH: ...}          # only when it is set here

Every node shares this machine's file system, so the script, the data and
the working directory are at the same paths everywhere; the ``python_venv``
prefix puts the interpreter that runs ``autodist cluster up`` first on the
nodes' PATH (the login shell of an sshd has the system PATH only), and
``PYTHONPATH`` goes with it so that a checkout run from its source tree is
the autodist every node imports.
"""
import getpass
import os
import shlex
import sys

import yaml

__all__ = ["spec_data", "write_spec", "is_ours", "GROUP", "MARK"]

GROUP = "cluster"
MARK = "# made by autodist cluster up --name "   # the first line of the file: whose spec it is


def _python_prefix(python, environ):
    """``export PATH=<python's directory>:<this machine's PATH>``, written out: the nodes share this machine's file
    system, and a prefix without shell syntax is one ``autodist spec validate`` does not warn about."""
    path = os.path.dirname(os.path.abspath(python)) + os.pathsep + (environ.get("PATH") or os.defpath)
    return "export PATH=" + shlex.quote(path)


def spec_data(names, count, rate, cores=None, threads=0, python=None, environ=None, identity=None):
    """The spec as plain data (``ResourceSpec.from_dict`` checks it); ``rate`` in bit/s; ``cores[i]``: node i's.

    ``identity`` (``up`` makes one afresh each time) goes into the spec's name: every cluster has the same
    addresses, and the calibration cache is keyed by the name with the nodes, so no cluster (of any name, or
    made again later) takes the figures another measured."""
    environ = os.environ if environ is None else environ
    nodes = []
    for index in range(count):
        node = {"address": names.address(index), "network_bandwidth": rate / 1e9}
        if index == 0:
            node["chief"] = True
        else:
            node["ssh_config"] = GROUP
        if cores:
            node["cores"] = list(cores[index])
        if threads:
            node["threads"] = threads
        nodes.append(node)
    group = {"username": getpass.getuser(), "port": names.ssh_port, "key_file": names.client_key,
             "known_hosts_file": names.known_hosts, "python_venv": _python_prefix(python or sys.executable, environ),
             "connect_timeout": 5}
    if environ.get("PYTHONPATH"):
        group["shared_envs"] = {"PYTHONPATH": environ["PYTHONPATH"]}
    data = {"name": "cluster-" + names.name + ("-" + identity if identity else ""), "nodes": nodes}
    if count > 1:
        data["ssh"] = {GROUP: group}
    return data


def write_spec(path, names, data):
    """Write ``data`` (checked first) to ``path``, which must not exist yet; the file starts with ``MARK``."""
    from autodist.spec.resource_spec import ResourceSpec
    ResourceSpec.from_dict(data, path=path)
    text = "{}{}\n# nodes 0..{} are namespaces {}0..; run the chief's script with " \
           "`autodist cluster exec --name {} 0 -- python SCRIPT`\n".format(
               MARK, names.name, len(data["nodes"]) - 1, names.prefix, names.name)
    text += yaml.safe_dump(data, sort_keys=False)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path


def is_ours(path, names):
    """Whether the file at ``path`` is the spec ``up`` wrote for this cluster (``down`` removes only that)."""
    try:
        with open(path) as f:
            return f.readline().rstrip("\n") == MARK + names.name
    except OSError:
        return False

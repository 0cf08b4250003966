"""An OpenSSH server in every node's namespace, with keys made for the cluster.

    make_keys(names, n)     a client key (authorized on every node), a host key per node, known_hosts
    start(names, i)         ip netns exec autodist-NAME-i /usr/sbin/sshd -f sshd_<i>.conf -E sshd_<i>.log
                            (it detaches and writes sshd_<i>.pid); waits until it listens
    stop(names, i)          SIGTERM to the pid in sshd_<i>.pid if that process is this node's sshd

The server listens on the node's address only, port 22 of its own network
stack, accepts the cluster's client key and nothing else, and drops a
session whose client stopped answering within ~6 s (``ClientAliveInterval``),
so a cut link also ends the commands running through it on the node, as a
dead connection does on a real machine.
"""
import getpass
import os
import signal
import time

from autodist.errors import ClusterError
from autodist.runner.cluster.network import run_tool

__all__ = ["make_keys", "start", "stop", "missing_reason", "SSHD_BINARY", "START_TIMEOUT"]

SSHD_BINARY = "/usr/sbin/sshd"
START_TIMEOUT = 15.0
_LISTENING = "Server listening on"
_CONFIG = """# made by autodist cluster up --name {name}: node {index}
Port {port}
ListenAddress {address}
HostKey {host_key}
PidFile {pid}
AuthorizedKeysFile {authorized}
AllowUsers {user}
StrictModes no
UsePAM no
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin {root_login}
MaxSessions 64
MaxStartups 64:30:128
ClientAliveInterval 2
ClientAliveCountMax 3
UseDNS no
PrintMotd no
LogLevel INFO
Subsystem sftp internal-sftp
"""


def missing_reason():
    """Why no sshd can start here (no binary, no privilege-separation directory), or None."""
    if not os.access(SSHD_BINARY, os.X_OK):
        return "{} not found: install openssh-server".format(SSHD_BINARY)
    if not os.path.isdir("/run/sshd"):
        try:
            os.makedirs("/run/sshd", mode=0o755)
        except OSError as e:
            return "sshd needs its privilege-separation directory /run/sshd: {}".format(e)
    return None


def _keygen(names, path):
    run_tool(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "autodist-cluster-" + names.name, "-f", path],
             "cluster {!r}: make key {}".format(names.name, path), timeout=60)
    return path


def _public(path):
    with open(path + ".pub") as f:
        return " ".join(f.read().split()[:2])


def _write(path, text):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def make_keys(names, count):
    """The client key, authorized_keys, one host key per node and the known_hosts file naming them."""
    _keygen(names, names.client_key)
    _write(names.authorized_keys, _public(names.client_key) + "\n")
    lines = []
    for index in range(count):
        _keygen(names, names.host_key(index))
        lines.append("{} {}\n".format(names.address(index), _public(names.host_key(index))))
    _write(names.known_hosts, "".join(lines))


def _config(names, index):
    user = getpass.getuser()
    _write(names.sshd_config(index), _CONFIG.format(
        name=names.name, index=index, port=names.ssh_port, address=names.address(index),
        host_key=names.host_key(index), pid=names.sshd_pid(index), authorized=names.authorized_keys, user=user,
        root_login="prohibit-password" if os.geteuid() == 0 else "no"))
    return names.sshd_config(index)


def _log_tail(names, index):
    try:
        with open(names.sshd_log(index), errors="replace") as f:
            return " | ".join(line.strip() for line in f.read().splitlines()[-5:]) or "its log is empty"
    except OSError as e:
        return "no log ({})".format(e.strerror)


def start(names, index, timeout=START_TIMEOUT):
    """Start node ``index``'s sshd in its namespace; returns its pid once it listens (bounded by ``timeout``)."""
    config = _config(names, index)
    run_tool(["ip", "netns", "exec", names.namespace(index), SSHD_BINARY, "-f", config, "-E", names.sshd_log(index)],
             "cluster {!r}: start node {}'s sshd".format(names.name, index))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pid = _pid(names, index)
        if pid is not None and _LISTENING in _log(names, index):
            return pid
        time.sleep(0.05)
    raise ClusterError("cluster {!r}: the sshd of node {} (namespace {}) did not listen on {}:{} within {:.0f} s: "
                       "{}".format(names.name, index, names.namespace(index), names.address(index), names.ssh_port,
                                   timeout, _log_tail(names, index)))


def _log(names, index):
    try:
        with open(names.sshd_log(index), errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def _pid(names, index):
    """The pid in node ``index``'s pid file when that process is still its sshd (pids are reused), else None."""
    try:
        with open(names.sshd_pid(index)) as f:
            pid = int(f.read().split()[0])
        with open("/proc/{}/cmdline".format(pid), "rb") as f:
            command = f.read()
    except (OSError, ValueError, IndexError):
        return None
    # sshd rewrites its title ("sshd: /usr/sbin/sshd -f <config> ... [listener] ..."): the config path is in it
    return pid if names.sshd_config(index).encode() in command else None


def stop(names, index, timeout=5.0):
    """Stop node ``index``'s sshd (listener) by the pid it wrote; True if one was running."""
    pid = _pid(names, index)
    if pid is None:
        return False
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and _pid(names, index) == pid:
        time.sleep(0.05)
    if _pid(names, index) == pid:
        os.kill(pid, signal.SIGKILL)
    return True

"""Host-key trust for the SSH runner: known_hosts, the opt-in, the two errors.

A server's key is checked against the user's known_hosts file (OpenSSH
format, hashed entries included).  An unknown host is refused unless the ssh
group sets ``accept_new_host_keys: true``, in which case its key is appended to
that file.  A key that differs from the recorded one is always refused, opt-in
or not: that is what a man-in-the-middle looks like.
"""
import os

import paramiko

from autodist.errors import LaunchError

__all__ = ["UnknownHostKeyError", "HostKeyChangedError", "TrustPolicy", "known_hosts_name",
           "append_known_host", "changed_key_error"]

DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"


class UnknownHostKeyError(LaunchError):
    """The host is not in known_hosts and accepting new keys was not enabled."""


class HostKeyChangedError(LaunchError):
    """The host's key differs from the one recorded in known_hosts."""


def known_hosts_name(address, port):
    """How OpenSSH names a host in known_hosts: ``addr`` on port 22, else ``[addr]:port``."""
    return address if int(port) == 22 else "[{}]:{}".format(address, port)


def append_known_host(path, name, key):
    """Append ``name keytype base64`` to known_hosts ``path`` (created 0600, dir 0700)."""
    path = os.path.expanduser(path)
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, mode=0o700, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with os.fdopen(fd, "a", encoding="ascii") as f:
        f.write("{} {} {}\n".format(name, key.get_name(), key.get_base64()))


class TrustPolicy(paramiko.MissingHostKeyPolicy):
    """paramiko's hook for a host missing from the known keys."""

    def __init__(self, where, address, port, known_hosts_file, accept_new):
        self.where = where
        self.address = address
        self.port = port
        self.known_hosts_file = known_hosts_file
        self.accept_new = accept_new

    def missing_host_key(self, client, hostname, key):
        if self.accept_new:
            append_known_host(self.known_hosts_file, hostname, key)
            client.get_host_keys().add(hostname, key.get_name(), key)
            return
        raise UnknownHostKeyError(
            "{}: host key is unknown ({} {} is not in {}). To trust this host, check "
            "that fingerprint and add the key with\n    ssh-keyscan -p {} {} >> {}\nor set "
            "'accept_new_host_keys: true' in this node's ssh group of the resource spec to "
            "record new hosts automatically.".format(
                self.where, key.get_name(), key.fingerprint, self.known_hosts_file,
                self.port, self.address, self.known_hosts_file))


def changed_key_error(where, address, port, known_hosts_file, exc):
    """The error for paramiko's ``BadHostKeyException``; never auto-accepted."""
    name = known_hosts_name(address, port)
    return HostKeyChangedError(
        "{}: WARNING: the host key CHANGED. {} records {} {} but the server offered "
        "{} {}. Someone may be intercepting the connection, or the host was reinstalled. "
        "autodist never accepts a changed key (not even with accept_new_host_keys). If the "
        "change is expected, remove the old entry with\n    ssh-keygen -R '{}' -f {}\n"
        "and trust the new key.".format(
            where, known_hosts_file, exc.expected_key.get_name(),
            exc.expected_key.fingerprint, exc.key.get_name(), exc.key.fingerprint, name,
            known_hosts_file))

"""Runner for a remote node over SSH (paramiko), configured by a spec ``ssh`` group.

One SSH connection per runner; every ``run`` is an ``exec`` channel carrying
``shell.remote_command(...)``: the user's ``python_venv`` prefix, the job's
environment (``shared_envs`` under the call's ``env``), the working directory
and the argv, in a new session whose first output line announces its pgid.

Stopping: closing a channel without a pty does not stop the remote command,
so ``terminate`` sends a group kill over a second channel (reconnecting if the
first connection died).  The command's own watchdog also kills its group when
the channel's stdin closes, i.e. when the command ends or the connection drops,
so a remote job never outlives its connection.

Connection loss is noticed by the reader thread: the channel closes without an
exit status; ``poll()`` then returns ``CONNECTION_LOST`` and
``connection_lost`` is True.  Keep-alives and TCP timeouts bound how long a
silently dead link can go unnoticed (about 10 s).
"""
import logging
import os
import posixpath
import re
import socket
import stat
import threading
import time

import paramiko

from autodist.errors import LaunchError
from autodist.runner.base import CONNECTION_LOST, EventProcessHandle, OutputPump, Runner, write_line
from autodist.runner.hostkeys import DEFAULT_KNOWN_HOSTS, TrustPolicy, changed_key_error
from autodist.runner.shell import kill_command, makedirs_command, parse_pgid_line, remote_command, remove_tree_command

__all__ = ["SSHRunner", "SSHProcessHandle"]

DEFAULT_CONNECT_TIMEOUT = 10.0
KEEPALIVE_INTERVAL = 3  # seconds between SSH keep-alives
TCP_USER_TIMEOUT_MS = 6000  # abort the TCP link when sent data stays unacknowledged this long
ORPHAN_GRACE = 5.0  # seconds the remote watchdog waits between TERM and KILL
# What the remote login shell prints when the command it waits for dies of our TERM or KILL (bash and dash:
# "Terminated"; bash in some contexts: "bash: line 1:  4242 Terminated  env -- ...").
_SHELL_STOP_REPORT = re.compile(r"(?:\S+: line \d+: +\d+ +)?(?:Terminated|Killed)(?: .*)?\Z")


def _quiet_paramiko_logs():
    """Keep paramiko's own log records off stderr unless the program set up logging.

    paramiko logs a failed handshake (a banner that never comes, a closed
    port) as ERROR records carrying its traceback. A program without logging
    handlers gets those from Python's last-resort handler, about twenty lines
    on stderr before the one-line reason ``LaunchError`` gives. A
    ``NullHandler`` on paramiko's logger stops that; the records still
    propagate to the handlers a program configured itself.
    """
    logger = logging.getLogger("paramiko")
    if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
        logger.addHandler(logging.NullHandler())


def _reason(exc):
    text = str(exc).strip()
    return "{}: {}".format(type(exc).__name__, text) if text else type(exc).__name__


class SSHProcessHandle(EventProcessHandle):

    def __init__(self, runner, argv, channel, sink, log_path):
        self._pgid_settled = threading.Event()  # pgid announced, or output over without it
        self._terminated = False
        super().__init__(runner.name, argv, OutputPump(runner.name, sink, log_path,
                                                       intercept=self._intercept, hide=self._stop_report))
        self._runner = runner
        self._channel = channel
        self._transport = channel.get_transport()
        self._term_lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True,
                         name="autodist-ssh-output-{}".format(runner.name)).start()

    def _intercept(self, line):
        if self.pgid is None:
            pgid = parse_pgid_line(line)
            if pgid is not None:
                self.pgid = self.pid = pgid
                self._pgid_settled.set()
                return True
        return False

    def _stop_report(self, line):
        """The remote shell's report of the stop we asked for (``terminate``): kept in the log, not shown."""
        return self._terminated and _SHELL_STOP_REPORT.match(line.strip()) is not None

    def _read(self):
        try:
            while True:
                data = self._channel.recv(65536)
                if not data:
                    break
                self._pump.feed(data)
        except (OSError, EOFError, paramiko.SSHException):
            pass  # the status below says whether the connection survived
        finally:
            self._pump.close()
        self._pgid_settled.set()
        self._code, self.connection_lost = self._collect_status()
        self._channel.close()
        self._done.set()

    def _collect_status(self):
        """(exit code, connection lost) once the channel has no more output."""
        channel = self._channel
        # Output can end before the process does (it may close its stdout).
        while not channel.status_event.wait(0.2):
            if not self._transport.is_active():
                break
        if channel.status_event.is_set() and channel.exit_status >= 0:
            return channel.exit_status, False
        return CONNECTION_LOST, not self._transport.is_active()

    def terminate(self, grace=5.0):
        with self._term_lock:
            if self._terminated:
                return self.poll()
            self._terminated = True
            if self._done.is_set() and not self.connection_lost:
                return self._code  # exited; its watchdog has cleared the group
            # A slow python_venv prefix may still be running: the pgid comes after it.
            self._pgid_settled.wait(max(grace, self._runner.timeout))
            if self.pgid is not None:
                self._runner.kill_group(self.pgid, grace)
            if not self._done.wait(grace + 2.0):
                # Closing the channel closes the command's stdin: its watchdog
                # stops the group even if our kill could not be delivered.
                self._channel.close()
                self._done.wait(2.0)
        return self.poll()


class SSHRunner(Runner):
    """A node reached over SSH with a spec ``ssh`` group (``SSHConfig``).

    Connects lazily on first use, or explicitly with ``connect()``; connection
    problems raise ``LaunchError`` naming host, port, user and reason, and host
    key problems its subclasses ``UnknownHostKeyError`` / ``HostKeyChangedError``.
    ``close()`` drops the connection, which also ends the processes started
    through it.
    """

    def __init__(self, address, ssh_config, sink=None):
        self.name = address
        self.address = address
        self.config = ssh_config
        self.port = int(ssh_config.port)
        self.python_venv = ssh_config.python_venv or None
        self.known_hosts_file = os.path.expanduser(ssh_config.known_hosts_file
                                                   or DEFAULT_KNOWN_HOSTS)
        self.timeout = float(ssh_config.connect_timeout or DEFAULT_CONNECT_TIMEOUT)
        self._sink = sink
        self._client = None
        self._generation = 0  # bumped by close()
        self._last_connect_failure = None  # time.monotonic() of the last failed connect
        self._lock = threading.Lock()
        self._connect_lock = threading.Lock()

    @property
    def where(self):
        return "ssh {}@{}:{}".format(self.config.username, self.address, self.port)

    # -- connection ---------------------------------------------------------

    def connect(self):
        self._transport()

    def _transport(self):
        """The live transport, connecting (again) if there is none.

        Connecting happens outside ``_lock`` so that ``close()`` never waits for
        a slow host; a connection that completes after ``close()`` is dropped.
        """
        with self._connect_lock:
            with self._lock:
                client, generation = self._client, self._generation
            transport = client.get_transport() if client is not None else None
            if transport is not None and transport.is_active():
                return transport
            try:
                fresh = self._open_client()
            except LaunchError:
                self._last_connect_failure = time.monotonic()
                raise
            self._last_connect_failure = None
            with self._lock:
                if generation != self._generation:
                    fresh.close()
                    raise LaunchError("{}: the runner was closed while connecting".format(
                        self.where))
                stale, self._client = self._client, fresh
            if stale is not None:
                stale.close()
            return fresh.get_transport()

    def _load_key(self):
        key_file = self.config.key_file
        if not key_file:
            return None
        path = os.path.expanduser(key_file)
        try:
            return paramiko.PKey.from_path(path)
        except OSError as e:
            raise LaunchError("{}: cannot read key_file {}: {}".format(self.where, path, e)) from e
        except (TypeError, paramiko.PasswordRequiredException) as e:
            raise LaunchError("{}: key_file {} is protected by a passphrase; load it into "
                              "ssh-agent and leave key_file unset".format(self.where, path)) from e
        except (ValueError, paramiko.SSHException) as e:
            raise LaunchError("{}: key_file {} is not a private key (RSA, ECDSA or Ed25519, "
                              "OpenSSH or PEM format): {}".format(self.where, path, e)) from e

    def _open_socket(self):
        """A TCP connection whose death is noticed within seconds, not minutes."""
        try:
            sock = socket.create_connection((self.address, self.port), timeout=self.timeout)
        except OSError as e:
            raise LaunchError("{}: cannot reach the host: {}".format(self.where, _reason(e))) from e
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        for name, value in (("TCP_KEEPIDLE", 3), ("TCP_KEEPINTVL", 2), ("TCP_KEEPCNT", 3),
                            ("TCP_USER_TIMEOUT", TCP_USER_TIMEOUT_MS)):
            if hasattr(socket, name):
                sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)
        return sock

    def unreachable(self, timeout=3.0):
        """Why the node cannot be reached now (its sshd's port silent for ``timeout`` s), or None; a refused
        connection is an answer: the machine and its network are up."""
        try:
            socket.create_connection((self.address, self.port), timeout=timeout).close()
        except ConnectionRefusedError:
            return None
        except OSError as e:
            return "no answer from {}:{} within {:g} s ({})".format(self.address, self.port, timeout, _reason(e))
        return None

    def _open_client(self):
        _quiet_paramiko_logs()
        key = self._load_key()
        client = paramiko.SSHClient()
        try:
            if os.path.exists(self.known_hosts_file):
                client.load_system_host_keys(self.known_hosts_file)
            client.set_missing_host_key_policy(TrustPolicy(
                self.where, self.address, self.port, self.known_hosts_file,
                bool(self.config.accept_new_host_keys)))
            client.connect(self.address, port=self.port, username=self.config.username,
                           pkey=key, look_for_keys=key is None, allow_agent=key is None,
                           sock=self._open_socket(), timeout=self.timeout,
                           banner_timeout=self.timeout, auth_timeout=self.timeout,
                           channel_timeout=self.timeout)
        except paramiko.BadHostKeyException as e:
            client.close()
            raise changed_key_error(self.where, self.address, self.port,
                                    self.known_hosts_file, e) from e
        except LaunchError:  # unreachable, or an unknown host key (TrustPolicy)
            client.close()
            raise
        except paramiko.AuthenticationException as e:
            client.close()
            raise LaunchError(
                "{}: authentication failed with {} ({}). Check username and key_file in this "
                "node's ssh group and that the public key is in the remote user's "
                "authorized_keys.".format(self.where, "key_file " + os.path.expanduser(
                    self.config.key_file) if self.config.key_file else "agent/default keys",
                    _reason(e))) from e
        except (paramiko.SSHException, OSError, EOFError) as e:
            client.close()
            raise LaunchError("{}: SSH connection failed: {}".format(self.where, _reason(e))) from e
        client.get_transport().set_keepalive(KEEPALIVE_INTERVAL)
        return client

    def close(self):
        with self._lock:
            self._generation += 1
            client, self._client = self._client, None
        if client is not None:
            client.close()

    # -- processes ----------------------------------------------------------

    def _exec_channel(self, command, what):
        transport = self._transport()
        try:
            channel = transport.open_session(timeout=self.timeout)
            channel.set_combine_stderr(True)
            channel.exec_command(command)
        except (paramiko.SSHException, OSError, EOFError) as e:
            raise LaunchError("{}: cannot start {}: {}".format(self.where, what, _reason(e))) from e
        return channel

    def run(self, argv, env=None, cwd=None, log_path=None, sink=None):
        merged = dict(self.config.shared_envs or {})
        merged.update(env or {})
        command = remote_command(argv, env=merged, cwd=cwd, prefix=self.python_venv,
                                 grace=ORPHAN_GRACE)
        channel = self._exec_channel(command, repr(argv[0]))
        return SSHProcessHandle(self, argv, channel,
                                sink if sink is not None else self._sink, log_path)

    def _exec(self, command, what, timeout):
        """Run a short helper command; (exit code or None on timeout, output)."""
        channel = self._exec_channel(command, what)
        deadline = time.monotonic() + timeout
        chunks = []
        try:
            channel.settimeout(0.2)
            while time.monotonic() < deadline:
                try:
                    data = channel.recv(65536)
                except socket.timeout:
                    continue
                if not data:
                    break
                chunks.append(data)
            done = channel.status_event.wait(max(deadline - time.monotonic(), 0.0))
            code = channel.exit_status if done and channel.exit_status >= 0 else None
        finally:
            channel.close()
        return code, b"".join(chunks).decode("utf-8", "replace")

    def _exec_checked(self, command, what):
        code, output = self._exec(command, what, self.timeout + 10.0)
        if code != 0:
            raise LaunchError("{}: {} failed (exit code {}): {}".format(
                self.where, what, code, output.strip()[-500:]))

    def kill_group(self, pgid, grace=5.0):
        """Stop remote process group ``pgid`` (TERM, then KILL after ``grace``).

        Used by ``terminate``; returns whether the kill was delivered.  Failures
        are reported on the sink, not raised, because teardown must go on for
        the other processes and nodes; right after a failed reconnect the node
        is not tried again for ``connect_timeout`` seconds, so stopping many
        processes of a dead node does not wait for each in turn.
        """
        failed_at = self._last_connect_failure
        if failed_at is not None and time.monotonic() - failed_at < self.timeout:
            write_line(self.name, self._sink, "autodist: cannot stop process group {}: the "
                       "node did not answer {:.0f}s ago".format(pgid, time.monotonic() - failed_at))
            return False
        try:
            code, _ = self._exec(kill_command(pgid, grace),
                                 "kill of process group {}".format(pgid), grace + self.timeout)
        except LaunchError as e:
            write_line(self.name, self._sink,
                       "autodist: could not stop process group {}: {}".format(pgid, e))
            return False
        return code == 0

    # -- files --------------------------------------------------------------

    def makedirs(self, path):
        self._exec_checked(makedirs_command(path), "mkdir -p {!r}".format(path))

    def remove_tree(self, path):
        self._exec_checked(remove_tree_command(path), "rm -rf {!r}".format(path))

    def copy(self, local_src, remote_dst):
        """SFTP upload; ``remote_dst`` is the destination's full path, parents created."""
        dst = remote_dst[2:] if remote_dst.startswith("~/") else remote_dst  # SFTP starts in ~
        parent = posixpath.dirname(remote_dst)
        if parent:
            self.makedirs(parent)
        try:
            sftp = self._transport().open_sftp_client()
        except (paramiko.SSHException, OSError, EOFError) as e:
            raise LaunchError("{}: cannot open SFTP: {}".format(self.where, _reason(e))) from e
        try:
            if os.path.isdir(local_src):
                self._put_tree(sftp, local_src, dst)
            else:
                sftp.put(local_src, dst)
                sftp.chmod(dst, stat.S_IMODE(os.stat(local_src).st_mode))
        except (OSError, paramiko.SSHException) as e:
            failed = ("read {}".format(e.filename) if isinstance(e, OSError) and e.filename is not None and
                      os.path.abspath(e.filename).startswith(os.path.abspath(local_src)) else "write on the node")
            raise LaunchError("{}: cannot copy {} to {} ({} failed): {}".format(
                self.where, local_src, remote_dst, failed, _reason(e))) from e
        finally:
            sftp.close()

    @staticmethod
    def _put_tree(sftp, local_root, remote_root):
        for here, _, files in os.walk(local_root):
            rel = os.path.relpath(here, local_root)
            target = remote_root if rel == "." else posixpath.join(remote_root, *rel.split(os.sep))
            try:
                sftp.stat(target)
            except OSError:
                sftp.mkdir(target)
            for name in files:
                src = os.path.join(here, name)
                sftp.put(src, posixpath.join(target, name))
                sftp.chmod(posixpath.join(target, name), stat.S_IMODE(os.stat(src).st_mode))

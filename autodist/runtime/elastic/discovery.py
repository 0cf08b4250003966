"""The host discovery script: which of the spec's nodes are available now.

    autodist run -r spec.yml --host-discovery-script ./hosts.sh ...

The script (any executable; run without arguments, from the working
directory) prints the hosts available now, one per line, each an address
of the resource spec, optionally with a number of slots::

    127.0.0.1
    10.0.0.2:4          # 4 of the GPUs (or CPUs) the spec lists for 10.0.0.2: its first 4
    [fe80::1]:2         # an IPv6 address in brackets when slots follow

Blank lines and ``#`` comments are ignored. The spec lists every node that
may ever join, with its settings (ssh group, GPUs, threads); the script
only says which are there (``membership``). A run that fails (a non-zero
status, no answer within ``timeout`` s, a line that is not a host) is
reported and changes nothing: the hosts found last stay. The script runs in a
process group of its own, which is killed when it does not finish in time.
"""
import dataclasses
import os
import signal
import subprocess
from typing import Dict, Optional

__all__ = ["Discovery", "Found", "parse_hosts", "DISCOVERY_TIMEOUT"]

DISCOVERY_TIMEOUT = 10.0
_REAP_WAIT = 5.0   # s for the killed group's pipes to close


@dataclasses.dataclass(frozen=True)
class Found:
    """One run of the script: ``hosts`` {address: slots or None}, or ``problem`` when it failed."""

    hosts: Optional[Dict[str, Optional[int]]]
    problem: str = ""


def _host(line):
    """``(address, slots or None)`` of one line; ValueError when it is not a host."""
    text = line.split("#", 1)[0].strip()
    if text.startswith("["):
        address, _, rest = text[1:].partition("]")
        slots = rest[1:] if rest.startswith(":") else None
        if rest and slots is None:
            raise ValueError(line)
    elif text.count(":") == 1:
        address, slots = text.split(":")
    else:
        address, slots = text, None
    if not address or " " in address or (slots is not None and not (slots.isdigit() and int(slots) > 0)):
        raise ValueError(line)
    return address, int(slots) if slots is not None else None


def parse_hosts(text):
    """{address: slots or None} of the script's output; ValueError naming the first line that is not a host."""
    hosts = {}
    for line in text.splitlines():
        if line.split("#", 1)[0].strip():
            address, slots = _host(line)
            hosts[address] = slots
    return hosts


class Discovery:
    """Runs the script, bounded (``timeout`` s), and parses what it prints."""

    def __init__(self, script, timeout=DISCOVERY_TIMEOUT):
        self.script = os.path.abspath(script)
        self.timeout = timeout

    def find(self):
        """A ``Found``: the hosts the script printed, or why there are none this time."""
        try:
            code, out, err = _run_group([self.script], self.timeout)
        except subprocess.TimeoutExpired:
            return Found(None, "it did not finish within {:g} s".format(self.timeout))
        except OSError as e:
            return Found(None, "it cannot be run: {}".format(e))
        if code != 0:
            last = [line for line in err.splitlines() if line.strip()]
            return Found(None, "it exited with code {}{}".format(code, ": " + last[-1] if last else ""))
        try:
            return Found(parse_hosts(out))
        except ValueError as e:
            return Found(None, "it printed {!r}, which is not an address or address:slots".format(str(e)))


def _run_group(argv, timeout):
    """``(status, stdout, stderr)`` of ``argv`` run in a process group of its own; past ``timeout`` s the whole
    group is killed (``subprocess.run(timeout=)`` kills only the direct child: a script's ``curl`` or ``sleep``
    would live on, holding its output open) and ``TimeoutExpired`` raised. The group is killed before the
    script is reaped, so its id cannot have passed to another process."""
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc.pid)
        try:
            proc.communicate(timeout=_REAP_WAIT)   # a child that left the group may still hold the pipes
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        raise
    return proc.returncode, out, err


def _kill_group(pgid):
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass

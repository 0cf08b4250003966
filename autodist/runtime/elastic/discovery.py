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
reported and changes nothing: the hosts found last stay.
"""
import dataclasses
import os
import subprocess
from typing import Dict, Optional

__all__ = ["Discovery", "Found", "parse_hosts", "DISCOVERY_TIMEOUT"]

DISCOVERY_TIMEOUT = 10.0


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
            done = subprocess.run([self.script], capture_output=True, text=True, timeout=self.timeout,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return Found(None, "it did not finish within {:g} s".format(self.timeout))
        except OSError as e:
            return Found(None, "it cannot be run: {}".format(e))
        if done.returncode != 0:
            last = [line for line in done.stderr.splitlines() if line.strip()]
            return Found(None, "it exited with code {}{}".format(done.returncode, ": " + last[-1] if last else ""))
        try:
            return Found(parse_hosts(done.stdout))
        except ValueError as e:
            return Found(None, "it printed {!r}, which is not an address or address:slots".format(str(e)))

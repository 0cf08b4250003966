"""The accepted ranges of a job's settings, checked where they are given, before anything runs.

``autodist run``'s options (as argparse types, ``cli.common.checked``: a bad
value exits with status 2 and a usage line) and ``AutoDist(...)``'s arguments
(``ArgumentError``) go through the same checks::

    steps, total_steps        a whole number >= 1 (session calls, for the ETA)
    stall_timeout             MIN_STALL_TIMEOUT .. MAX_SECONDS s (the API's None: no stall reports)
    restart_backoff           0 .. MAX_SECONDS s (a finite number: it is slept)
    max_restarts              a whole number >= 0
    min_nodes                 1 .. the spec's node count, and only with restarts (it acts at a restart)
    accumulation_steps        1 .. MAX_ACCUMULATION_STEPS micro-steps per update
"""
import math
import numbers

from autodist.errors import ArgumentError
from autodist.runtime.watch.stall import QUIET_AFTER

__all__ = ["MIN_STALL_TIMEOUT", "MAX_SECONDS", "MAX_ACCUMULATION_STEPS", "whole", "accumulation_steps", "seconds",
           "stall_timeout", "restart_backoff",
           "check_min_nodes", "check_job_arguments"]

#: Nodes report once a second, and one unheard for QUIET_AFTER s counts as quiet: a stall timeout not
#: beyond that would call healthy nodes stalled between two late reports.
MIN_STALL_TIMEOUT = QUIET_AFTER + 1.0
MAX_SECONDS = 7 * 24 * 3600.0   # a week
#: Micro-steps per update: the plan keeps them in an int64 (a larger number was a raw protobuf error); 2**31 - 1
#: micro-batches is far beyond any batch one accumulates, and fits every integer type on the way.
MAX_ACCUMULATION_STEPS = 2 ** 31 - 1


def whole(value, name, least=1, most=None):
    """``value`` as an int >= ``least`` (and <= ``most``, when given; a bool, a float or text is refused)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < least:
        raise ArgumentError("{} must be a whole number >= {}, got {!r}".format(name, least, value))
    if most is not None and value > most:
        raise ArgumentError("{} must be a whole number from {} to {}, got {!r}".format(name, least, most, value))
    return int(value)


def accumulation_steps(value, name="accumulation_steps"):
    return whole(value, name, most=MAX_ACCUMULATION_STEPS)


def seconds(value, name, least, most=MAX_SECONDS):
    """``value`` as a float of seconds in [``least``, ``most``] (inf and nan are refused)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) \
            or not least <= value <= most:
        raise ArgumentError("{} must be a number of seconds from {:g} to {:g} ({:g} s is a week), got {!r}".format(
            name, least, most, MAX_SECONDS, value))
    return float(value)


def stall_timeout(value, name="stall_timeout"):
    return seconds(value, name, MIN_STALL_TIMEOUT)


def restart_backoff(value, name="restart_backoff"):
    return seconds(value, name, 0.0)


def check_min_nodes(min_nodes, node_count, restarts, name="min_nodes", restarts_name="max_restarts"):
    """``min_nodes`` (None: off), checked against the spec's ``node_count`` and whether restarts are on."""
    if min_nodes is None:
        return None
    whole(min_nodes, name)
    if not restarts:
        raise ArgumentError("{} acts when a job restarts (it leaves out unreachable nodes then): give {} too, or "
                            "leave {} out".format(name, restarts_name, name))
    if node_count is not None and min_nodes > node_count:
        raise ArgumentError("{} is {} but the resource spec has {} node(s): a job can never keep more nodes than "
                            "it has; give at most {}".format(name, min_nodes, node_count, node_count))
    return min_nodes


def check_job_arguments(spec, total_steps=None, stall=None, max_restarts=0, backoff=2.0, min_nodes=None,
                        restarted=False):
    """``AutoDist(...)``'s job settings (see the module docstring); ``restarted``: this process is a
    supervised attempt, whose restarts its supervisor runs."""
    if total_steps is not None:
        whole(total_steps, "total_steps")
    if stall is not None:
        stall_timeout(stall)
    whole(max_restarts, "max_restarts", least=0)
    restart_backoff(backoff)
    check_min_nodes(min_nodes, len(spec.node_specs), max_restarts or restarted)

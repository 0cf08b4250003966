"""Typed errors raised by autodist.

Every user-facing error names what it is about (file, key, variable, host, pass)
and, where there is one, the fix. Each class also derives from the closest
built-in exception so that callers catching ``ValueError`` or ``RuntimeError``
keep working.
"""

__all__ = [
    "AutoDistError",
    "ResourceSpecError",
    "CaptureError",
    "GraphItemError",
    "StrategyError",
    "TransformError",
    "SessionError",
    "StallError",
    "GraphChangedError",
    "LaunchError",
    "PreflightError",
    "GraphMismatchError",
    "RemoteWorkerError",
    "CheckpointError",
    "FunctionError",
    "ArgumentError",
    "ClusterError",
]


class AutoDistError(Exception):
    """Base class of every error autodist raises on purpose."""


class ResourceSpecError(AutoDistError, ValueError):
    """A resource spec file is malformed.

    The message reads ``<file>:<line>: <key path>: <problem>``, e.g.
    ``spec.yml:7: nodes[1].gpu: unknown key (did you mean 'gpus'?)``.
    """

    def __init__(self, message, path=None, line=None, key=None):
        self.path = path
        self.line = line
        self.key = key
        self.problem = message
        where = ""
        if path is not None:
            where = str(path) + (":{}".format(line) if line is not None else "") + ": "
        if key:
            where += key + ": "
        super().__init__(where + message)


class CaptureError(AutoDistError, RuntimeError):
    """The training graph cannot be captured (e.g. a model an unmodified script trains is not built)."""


class GraphItemError(AutoDistError, ValueError):
    """A GraphItem is inconsistent or cannot be (de)serialized."""


class StrategyError(AutoDistError, ValueError):
    """A strategy or a strategy builder's configuration is invalid."""


class TransformError(AutoDistError, RuntimeError):
    """A graph-transformation pass failed; names the pass, the variable and the op."""

    def __init__(self, message, pass_name=None, variable=None, op=None, passes_done=()):
        self.problem = message
        self.pass_name = pass_name
        self.variable = variable
        self.op = op
        self.passes_done = tuple(passes_done)
        parts = []
        if pass_name:
            parts.append("pass '{}'".format(pass_name))
            if self.passes_done:
                parts[-1] += " (after {})".format(", ".join(self.passes_done))
        if variable:
            parts.append("variable '{}'".format(variable))
        if op:
            parts.append("op '{}'".format(op))
        prefix = ", ".join(parts)
        super().__init__((prefix + ": " if prefix else "") + message)


class SessionError(AutoDistError, RuntimeError):
    """The distributed session was used in a way it cannot honour."""


class GraphChangedError(SessionError):
    """The user's graph changed after the distributed session was created."""


class LaunchError(AutoDistError, RuntimeError):
    """Processes of a job could not be started."""


class PreflightError(LaunchError):
    """One or more hosts failed the checks run before launch.

    ``failures`` maps each failing host to the reason.
    """

    def __init__(self, failures):
        self.failures = dict(failures)
        lines = ["{}: {}".format(host, reason) for host, reason in sorted(self.failures.items())]
        super().__init__("preflight failed on {} host(s); nothing was launched:\n  {}".format(
            len(self.failures), "\n  ".join(lines)))


class GraphMismatchError(LaunchError):
    """A process of a job captured another graph than the chief's; the message names the first difference
    (the optimizer or a hyper-parameter, a variable, an op, a function) and the process."""


class RemoteWorkerError(AutoDistError, RuntimeError):
    """A process of the job (worker or server) exited or its connection dropped."""

    def __init__(self, host, exit_code=None, log_tail="", reason=""):
        self.host = host
        self.exit_code = exit_code
        self.log_tail = log_tail
        what = reason or ("exited with code {}".format(exit_code) if exit_code is not None
                          else "connection lost")
        msg = "worker on {} {}".format(host, what)
        if log_tail:
            msg += "; last lines of its log:\n" + log_tail
        super().__init__(msg)


class StallError(RemoteWorkerError):
    """The job made no progress for its stall timeout; ``report`` names the nodes that held it up.

    The message reads ``worker on <host> stalled: ...`` followed by one line per
    node (``autodist.runtime.watch.stall``); ``host`` is the first node that had not
    reached the step the others wait in.
    """

    def __init__(self, host, report, log_tail=""):
        super().__init__(host, reason=report)
        self.report = report
        self.log_tail = log_tail


class CheckpointError(AutoDistError, ValueError):
    """A checkpoint cannot be written or restored: a variable is missing, a shape differs, wrong graph."""


class FunctionError(AutoDistError, TypeError):
    """``AutoDist.function`` was called with arguments it cannot turn into graph inputs."""


class ArgumentError(AutoDistError, ValueError):
    """An argument autodist was given is outside what it accepts or can run as one device would.

    The message names the argument (``stall_timeout``, ``--steps``,
    ``model.fit(validation_split=...)``), what it accepts and, where there is
    one, the fix. A ``ValueError``, as Keras' own refusals of ``fit``'s
    arguments are.
    """


class ClusterError(AutoDistError, RuntimeError):
    """``autodist cluster`` cannot make, change or remove an emulated cluster on this machine.

    The message names the cluster, the object (namespace, link, sshd, file) and,
    where there is one, the fix (run as root, install iproute2, ``down`` first).
    """

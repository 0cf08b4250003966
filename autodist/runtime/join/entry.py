"""Whether ``AutoDist(...)`` joins a job the platform started, and the PlatformJob if so (``AutoDist`` asks here).

A process joins when no autodist chief launched it (no ``AUTODIST_JOB``) and
it was given no JobContext, and either it has no spec file and the
environment places it (TF_CONFIG, ``srun --ntasks``, ``mpirun``), or it has
one and ``AUTODIST_NODE_ADDRESS``. A spec that says ``started_by: platform``
needs that address. TensorFlow is imported only when the process does join.
"""
from autodist.errors import ResourceSpecError
from autodist.runtime.context import JobContext
from autodist.runtime.join.places import EXIT_RETRY, NODE_ADDRESS_ENV, platform_started

__all__ = ["platform_job", "READY_TIMEOUT_ENV", "DEFAULT_READY_TIMEOUT"]

DEFAULT_READY_TIMEOUT = 600.0
READY_TIMEOUT_ENV = "AUTODIST_READY_TIMEOUT"


def platform_job(spec, job, max_restarts, ready_timeout, environ, say):
    """The ``PlatformJob`` this process joins (``spec``: its ResourceSpec or None), or None (module docstring)."""
    if job is not None or JobContext.from_env(environ) is not None:
        return None
    if spec is not None and not environ.get(NODE_ADDRESS_ENV):
        if spec.started_by == "platform":
            raise ResourceSpecError("the spec's processes are started by the platform (started_by: platform): set "
                                    "{} to this process's node address in every process".format(NODE_ADDRESS_ENV),
                                    path=spec.path, key="started_by")
        return None
    if spec is None and platform_started(environ) in (None, "spec"):
        raise ResourceSpecError("AutoDist() without a resource spec file joins a job the platform started, and "
                                "found none in the environment (TF_CONFIG, srun --ntasks, mpirun); pass a spec file "
                                "(resource_specs/ has examples)")
    if max_restarts:
        raise ResourceSpecError("max_restarts: a job the platform started is restarted by the platform (its "
                                "restart policy, on the status {}); leave max_restarts at 0".format(EXIT_RETRY))
    from autodist.runtime.join.platform import PlatformJob
    return PlatformJob.from_environ(environ, spec, ready_timeout_of(ready_timeout, environ), say)


def ready_timeout_of(value, environ):
    """The start-up bound in seconds: ``value``, else ``AUTODIST_READY_TIMEOUT``, else 600; 1 s to a week."""
    if value is None:
        text = environ.get(READY_TIMEOUT_ENV, "").strip()
        if not text:
            return DEFAULT_READY_TIMEOUT
        try:
            value = float(text)
        except ValueError:
            raise ResourceSpecError("expected seconds, got {!r}".format(text), key=READY_TIMEOUT_ENV) from None
    if not 1.0 <= value <= 7 * 86400:
        raise ResourceSpecError("ready_timeout must be from 1 s to a week, got {!r}".format(value),
                                key="ready_timeout")
    return float(value)

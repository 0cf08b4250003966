"""What the elastic supervisor and its attempts tell each other: an environment variable, two files, two statuses.

    supervisor                                        attempt k (a chief of its own job)
      ELASTIC_ENV = {"nodes": [...], "slots": {...},   -> its spec: those nodes (``membership.restricted``)
                     "previous": [...], "control": DIR,
                     "change": {...} or null,            -> "membership change n, ...: the first step of the new
                     "signal": "SIGTERM", "grace": 30,       plan ran 9.8 s after the change; steps lost: 0"
                     "first_replicas": R}
      DIR/request.json  {"change": n, "what": ...}    -> saves a checkpoint at its next step boundary,
                                                         stops its job, exits RESIZED
      (a member's report says "leaving": SIGTERM)     -> the same, on its own
                                                      <- DIR/outcome.json {"leaving": [...], "what": ...,
                                                         "at": time of the change, "step": global step}

A member (launched by the attempt's chief) learns the preemption signal from
``PREEMPTION_ENV``. Statuses: ``RESIZED`` (the attempt stopped for a
membership change: not a failure) and ``restart.NODE_FAILED`` (a node failed;
also the supervisor's own status when fewer than ``min_nodes`` hosts remain:
a scheduler's "try again later").
"""
import json
import os

from autodist.fileio import atomic_write_bytes

__all__ = ["ELASTIC_ENV", "PREEMPTION_ENV", "BATCH_SCALE_ENV", "RESIZED", "REQUEST", "OUTCOME", "read_json",
           "write_json", "attempt_settings"]

ELASTIC_ENV = "AUTODIST_ELASTIC"         # the supervisor's settings for one attempt (JSON)
PREEMPTION_ENV = "AUTODIST_PREEMPTION"   # "<signal name> <grace s>": a member's preemption notice
BATCH_SCALE_ENV = "AUTODIST_BATCH_SCALE"   # replicas now / replicas of the first attempt (keep_per_replica_batch)
RESIZED = 79                             # an attempt's status: stopped for a membership change
REQUEST = "request.json"
OUTCOME = "outcome.json"


def read_json(directory, name):
    """The JSON object in ``directory/name``, or None when there is none (or it is not complete yet)."""
    try:
        with open(os.path.join(directory, name)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def write_json(directory, name, data):
    """Write ``data`` to ``directory/name`` atomically (a reader sees all of it or nothing)."""
    atomic_write_bytes(os.path.join(directory, name), json.dumps(data, sort_keys=True).encode("utf-8"))


def attempt_settings(environ):
    """The supervisor's settings for this attempt (``ELASTIC_ENV``), or None outside an elastic job."""
    text = (environ or {}).get(ELASTIC_ENV)
    return json.loads(text) if text else None

"""Every name the rewritten graph uses, defined once.

A job's processes never exchange names: each node rewrites its own copy of
the user's graph and must arrive at the same op names, collective keys and
device strings as every other node, and checkpoints written under one
strategy must be read under another. So the names are functions of what all
nodes share (the strategy, the job id, the single-device names), and they
live here, where the kernel, the strategy builders, checkpoints and the
runtime read them::

    replica copies     AutoDist-Replica-<i>/<op>          (i: the replica's index on its node)
    shards             <var>/part_<i>                     (tensor <var>/part_<i>:0)
    proxies            AutoDist-Proxy/<var>/proxy
                       AutoDist-Proxy/<var>/proxy_of_task_<k>, refresh_task_<k>  (the chief's
                       writes of node k's proxy; the same resource by its shared name)
    init ops           AutoDist-Init/servers, /sync, /local
    devices            /job:worker/task:<k>/device:<TYPE>:<i>
    collective keys    key_base + 1 ...           training (in the order the passes ask)
                       key_base + 80001 ...       training of the every-step group (under accumulation)
                       key_base + 90000 ...       initialization, one key per dtype
                       key_base + 95000 + 64 s    restore slot s of checkpoints
                       (each kind in its window, ``KEY_WINDOWS``: one that would overrun it fails
                       the transformation, naming the window, before any key is used)
    collective group   key_base // 100000

Task numbers are ranks in ``autodist.spec.rules.task_order``; this module
only writes and parses them in device strings. Nothing here imports
TensorFlow: the strategy builders use it too.
"""
import hashlib
import re

__all__ = [
    "REPLICA_PREFIX", "replica_prefix", "single_device_name", "shard_name", "proxy_scope", "PROXY_HANDLE",
    "proxy_name", "sync_scope", "ACCUMULATE_SCOPE", "accumulator_scope", "micro_step_name", "INIT_SERVERS", "INIT_SYNC", "INIT_LOCAL", "INIT_OPS", "job_container",
    "MEAN_ON_READ_SCOPE", "mean_on_read_name",
    "WORKER_JOB", "worker_device", "host_cpu", "collective_group_leader", "task_of",
    "KEY_WINDOW", "STATISTICS_KEY_OFFSET", "EVERY_STEP_KEY_OFFSET", "INIT_KEY_OFFSET", "RESTORE_KEY_OFFSET", "RESTORE_KEYS_PER_SLOT", "key_base", "group_key",
    "KEY_WINDOWS", "key_window",
]

REPLICA_PREFIX = "AutoDist-Replica-"


def replica_prefix(index):
    """``replica_prefix(1) == "AutoDist-Replica-1/"``: the name scope of a node's ``index``-th replica."""
    return "{}{}/".format(REPLICA_PREFIX, index)


def single_device_name(name):
    """The single-device name a replica's copy derives from (other names as they are).

    ``"AutoDist-Replica-1/dense/MatMul:0" -> "dense/MatMul:0"``
    """
    if name.startswith(REPLICA_PREFIX):
        return name.split("/", 1)[1]
    return name


def shard_name(var_op, index):
    """``shard_name("emb", 1) == "emb/part_1"``: the op name of shard ``index`` of a partitioned variable."""
    return "{}/part_{}".format(var_op, index)


def proxy_scope(var_op):
    """The name scope of the ops that keep ``var_op``'s local proxy."""
    return "AutoDist-Proxy/{}/".format(var_op)


PROXY_HANDLE = "proxy"


def proxy_name(var_op):
    """The handle op of ``var_op``'s local proxy (checkpoint restores refresh it by this name)."""
    return proxy_scope(var_op) + PROXY_HANDLE


def sync_scope(base, group):
    """The name scope ``base`` ("AutoDist-PS/") of synchronization group ``group`` ("": the only one).

    A job that accumulates gradients synchronizes the train ops that update
    at every call apart (``Assignment.sync_groups``); their ops get their own
    scope, ``sync_scope("AutoDist-PS/", "every-step") == "AutoDist-PS-every-step/"``.
    """
    return base if not group else "{}-{}/".format(base.rstrip("/"), group)


ACCUMULATE_SCOPE = "AutoDist-Accumulate/"
MEAN_ON_READ_SCOPE = "AutoDist-MeanOnRead/"


def mean_on_read_name(var_op):
    """The op (in every local replica) reading the job's mean of the per-replica statistic ``var_op``."""
    return MEAN_ON_READ_SCOPE + var_op


def accumulator_scope(var_op):
    """The name scope of ``var_op``'s gradient accumulators (``kernel.accumulate``)."""
    return "{}{}/".format(ACCUMULATE_SCOPE, var_op)


def micro_step_name(train_op):
    """The op a micro-step runs in place of ``train_op`` when gradients are accumulated."""
    return "{}micro_step/{}".format(ACCUMULATE_SCOPE, train_op)


# The three init ops a node runs, in this order (``autodist.kernel.initialization``).
INIT_SERVERS = "AutoDist-Init/servers"
INIT_SYNC = "AutoDist-Init/sync"
INIT_LOCAL = "AutoDist-Init/local"
INIT_OPS = (INIT_SERVERS, INIT_SYNC, INIT_LOCAL)


def job_container(job_id):
    """The resource container of a job's stateful ops (``Session.reset`` drops it)."""
    return "autodist-" + job_id


WORKER_JOB = "worker"
_WORKER_DEVICE = re.compile(r"^/job:" + WORKER_JOB + r"/task:(\d+)/device:([A-Z]+):(\d+)$")


def worker_device(task, device_type, index):
    """``worker_device(1, "GPU", 0) == "/job:worker/task:1/device:GPU:0"``: a compiled device name."""
    return "/job:{}/task:{}/device:{}:{}".format(WORKER_JOB, task, device_type, index)


def host_cpu(task):
    """The CPU device of task ``task``: where its host-side ops and files live."""
    return worker_device(task, "CPU", 0)


def collective_group_leader(task):
    """The server-config value that names task ``task`` the leader of the job's collectives."""
    return "/job:{}/replica:0/task:{}".format(WORKER_JOB, task)


def task_of(device):
    """The task number in a compiled device name; ValueError for any other string."""
    match = _WORKER_DEVICE.match(device)
    if not match:
        raise ValueError("'{}' is not a compiled device name (/job:{}/task:<k>/device:<TYPE>:<i>); compile "
                         "the strategy first".format(device, WORKER_JOB))
    return int(match.group(1))


KEY_WINDOW = 100000
STATISTICS_KEY_OFFSET = 70000   # synchronized batch norm: one key per statistics marker
EVERY_STEP_KEY_OFFSET = 80000   # collectives of the train ops that update at every call, when others accumulate
INIT_KEY_OFFSET = 90000
RESTORE_KEY_OFFSET = 95000
RESTORE_KEYS_PER_SLOT = 64
#: A job's collective instance keys by kind, as offsets from its key base: ``(name, first, end)``, ``end``
#: excluded. The windows follow one another and end at ``KEY_WINDOW``, where the next job's keys start.
KEY_WINDOWS = (("training", 1, STATISTICS_KEY_OFFSET), ("statistics", STATISTICS_KEY_OFFSET, EVERY_STEP_KEY_OFFSET),
               ("every-step", EVERY_STEP_KEY_OFFSET + 1, INIT_KEY_OFFSET),
               ("init", INIT_KEY_OFFSET, RESTORE_KEY_OFFSET), ("restore", RESTORE_KEY_OFFSET, KEY_WINDOW))


def key_window(name):
    """``(first, end)`` offsets of window ``name`` of ``KEY_WINDOWS`` (``end`` excluded)."""
    for window, first, end in KEY_WINDOWS:
        if window == name:
            return first, end
    raise ValueError("no collective key window {!r}; the windows are {}".format(
        name, ", ".join(w for w, _, _ in KEY_WINDOWS)))


def key_base(job_id, explicit=0):
    """First collective key of a job: instance keys of jobs sharing servers must not meet.

    Each job's servers normally live and die with it; long-lived servers that
    run many jobs (tests, external orchestration) should pass distinct
    ``explicit`` bases (``collective_key_base``), which rule collisions out.
    """
    if explicit:
        return explicit
    digest = int(hashlib.sha256(job_id.encode()).hexdigest()[:8], 16)
    return KEY_WINDOW * (1 + digest % 20000)


def group_key(base):
    """The collective group key of the job whose keys start at ``base``."""
    return base // KEY_WINDOW

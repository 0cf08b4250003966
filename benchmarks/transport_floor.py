"""What one exchange of TensorFlow's own transport costs on this machine: the floor under a step.

    python benchmarks/transport_floor.py [--calls 2000] [--threads 1] [--no-pin] [--modes ...] [--label NAME]

Two processes, each a TensorFlow server of a two-task cluster on 127.0.0.1
(pinned to a core each, ``--threads`` intra- and inter-op threads, as
``step_time.py`` runs its nodes), time the smallest calls a distributed step
is made of, through callables of the master session (as autodist's run plans
call a step). The payload is 11 floats, the tiny model's variables:

    local           a step with no remote op: the session's own floor
    remote_read     task 1 reads a variable on task 0 (RunGraph on task 0 + one RecvTensor)
    push_pull       task 1 adds to a variable on task 0 and reads it back: a PS step's messages
                    without anyone to wait for (RunGraph + a RecvTensor each way)
    all_gather      both tasks all-gather and add (what autodist all-reduces a small bucket with)
    ring_reduce     both tasks ring all-reduce (CollectiveReduceV2)

In the remote modes task 0 only serves, the most favourable case: in a
training step it computes and serves at the same time. A synchronous
parameter-server step needs a push and, after the server applied every
node's push, a pull: ``push_pull`` is its floor before any waiting; compare
``autodist calibrate``'s "synchronous PS protocol per step", which adds the
wait. Prints the median and p90 of task 1's calls (both tasks for the
collectives) and saves JSON under ``benchmarks/results/``.
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import _results  # noqa: E402

MODES = ("local", "remote_read", "push_pull", "all_gather", "ring_reduce")
MARK = "TRANSPORT_FLOOR "
_SIZE = 11
#: Seconds one mode's two processes may take (start, 50 warm-up calls, ``--calls`` timed ones).
_TIMEOUT = 300.0


def _free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _build(tf, task, mode):
    """The op task ``task`` calls in ``mode``, the initializers task 0 runs, and whether they ran."""
    with tf.device("/job:worker/task:0/cpu:0"):
        server_var = tf.Variable(tf.zeros([_SIZE]), name="on_task_0")
    with tf.device("/job:worker/task:{}/cpu:0".format(task)):
        x = tf.fill([_SIZE], float(task + 1))
        if mode == "local" or (mode in ("remote_read", "push_pull") and task == 0):
            out = tf.reduce_sum(x * 2.0)
        elif mode == "remote_read":
            out = tf.reduce_sum(server_var.read_value() + x)
        elif mode == "push_pull":
            out = tf.reduce_sum(server_var.assign_add(x, read_value=True))
        elif mode == "all_gather":
            rows = tf.raw_ops.CollectiveGatherV2(input=tf.reshape(x, [1, _SIZE]), group_size=2, group_key=1,
                                                 instance_key=1, ordering_token=[])
            out = tf.reduce_sum(tf.reduce_sum(rows, 0))
        else:
            out = tf.reduce_sum(tf.raw_ops.CollectiveReduceV2(
                input=x, group_size=2, group_key=1, instance_key=1, ordering_token=[], merge_op="Add",
                final_op="Id"))
    return out, [server_var.initializer], server_var.is_initialized()


def child(task, mode, ports, calls, threads, pin):
    """One task of one mode: time ``calls`` calls; print MARK + JSON of the times."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    if pin:
        cores = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cores[task % len(cores)]})
    import numpy as np  # noqa: F401 (TensorFlow's)
    import tensorflow as tf
    from tensorflow.core.protobuf import config_pb2
    tf.compat.v1.disable_eager_execution()
    cluster = tf.train.ClusterSpec({"worker": ["127.0.0.1:{}".format(p) for p in ports]})
    config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=threads, inter_op_parallelism_threads=threads)
    config.experimental.collective_group_leader = "/job:worker/replica:0/task:0"
    server = tf.distribute.Server(cluster, "worker", task, config=config, start=True)
    graph = tf.Graph()
    with graph.as_default():
        out, inits, ready = _build(tf, task, mode)
    session = tf.compat.v1.Session(server.target, config=config, graph=graph)
    if task == 0:
        session.run(inits)
    options = config_pb2.CallableOptions()
    options.fetch.append(out.name)
    call = session._make_callable_from_options(options)
    if mode in ("remote_read", "push_pull"):
        if task == 0:   # it only serves, until the parent closes its stdin (task 1 is done)
            print(MARK + "[]", flush=True)
            sys.stdin.read()
            return
        _await_initialized(session, ready)
    for _ in range(50):
        call()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    print(MARK + json.dumps(times), flush=True)
    time.sleep(0.5)   # the other task's last collective may still need this server


def _await_initialized(session, ready):
    """Task 1 waits (bounded) until task 0 has initialized the variable it reads."""
    deadline = time.monotonic() + _TIMEOUT / 2
    while not session.run(ready):
        if time.monotonic() > deadline:
            raise SystemExit("transport_floor: task 0 did not initialize its variable within {:.0f} s".format(
                _TIMEOUT / 2))
        time.sleep(0.05)


def _run_mode(mode, args):
    ports = _free_ports(2)
    argv = lambda task: [sys.executable, os.path.abspath(__file__), "--child", str(task), mode,  # noqa: E731
                         ",".join(map(str, ports)), "--calls", str(args.calls), "--threads", str(args.threads)] + \
        ([] if args.pin else ["--no-pin"])
    procs = [subprocess.Popen(argv(task), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              text=True) for task in (0, 1)]
    outs = {}
    try:
        deadline = time.monotonic() + _TIMEOUT
        # task 1 first: in the remote modes task 0 serves until task 1 is done
        for task in (1, 0):
            out, _ = procs[task].communicate(timeout=max(1.0, deadline - time.monotonic()))
            outs[task] = [json.loads(line[len(MARK):]) for line in out.splitlines() if line.startswith(MARK)]
    except subprocess.TimeoutExpired:
        raise SystemExit("transport_floor: mode {} did not finish within {:.0f} s".format(mode, _TIMEOUT))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
    if not outs.get(1):
        raise SystemExit("transport_floor: task 1 of mode {} printed no times (exit {})".format(
            mode, procs[1].returncode))
    tasks = (0, 1) if mode in ("local", "all_gather", "ring_reduce") else (1,)
    times = [t for task in tasks for t in (outs.get(task) or [[]])[0]]
    return {"median_ms": statistics.median(times) * 1e3,
            "p90_ms": sorted(times)[int(0.9 * (len(times) - 1))] * 1e3, "calls": len(times)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000, help="timed calls per task and mode (default 2000)")
    parser.add_argument("--threads", type=int, default=1, help="intra- and inter-op threads (default 1)")
    parser.add_argument("--pin", action=argparse.BooleanOptionalAction, default=True,
                        help="pin task k to core k (default: on)")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--label", default="transport_floor", help="results file name")
    parser.add_argument("--results-dir", help="default: benchmarks/results")
    parser.add_argument("--child", nargs=3, metavar=("TASK", "MODE", "PORTS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        task, mode, ports = args.child
        child(int(task), mode, [int(p) for p in ports.split(",")], args.calls, args.threads, args.pin)
        return 0
    if args.results_dir:
        _results.RESULTS_DIR = os.path.abspath(args.results_dir)
    print("load average {:.2f} {:.2f} {:.2f}; {} calls per task, {} thread(s), {}".format(
        *os.getloadavg(), args.calls, args.threads, "pinned" if args.pin else "not pinned"), flush=True)
    found = {}
    for mode in args.modes:
        found[mode] = _run_mode(mode, args)
        print("  {:<12} median {:6.3f} ms   p90 {:6.3f} ms".format(mode, found[mode]["median_ms"],
                                                               found[mode]["p90_ms"]), flush=True)
    _results.save(args.label, {"modes": found, "calls": args.calls, "threads": args.threads, "pin": args.pin,
                               "load": os.getloadavg()})
    return 0


if __name__ == "__main__":
    sys.exit(main())

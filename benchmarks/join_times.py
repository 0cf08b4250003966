"""How long a platform-started job takes to come together, and to stop after one of its processes is killed.

    python benchmarks/join_times.py [--nodes 3] [--stagger 2.0] [--rounds 3]

Starts ``--nodes`` processes of ``tests/job/scripts/join_linear.py`` as
Kubernetes would (TF_CONFIG, loopback addresses 127.0.0.x), ``--stagger`` s
apart in a shuffled order, and reads from each its ``k of k processes up``
line: **start-up** is the time from the first process's start to the last
process up. Then, with the job training, it kills worker 1 (SIGKILL) and
measures **stop** as the time from the kill to the last other process's exit
(each must exit 143). Results go to ``benchmarks/results/join_times.json``.
"""
import argparse
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SCRIPT = os.path.join(REPO, "tests", "job", "scripts", "join_linear.py")
sys.path.insert(0, HERE)
from _results import save  # noqa: E402


def _ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("0.0.0.0", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def _envs(nodes):
    servers = ["127.0.0.{}:{}".format(i + 1, p) for i, p in enumerate(_ports(nodes))]
    tasks = [{"type": "chief", "index": 0}] + [{"type": "worker", "index": i} for i in range(nodes - 1)]
    cluster = {"chief": servers[:1], "worker": servers[1:]}
    return [{"TF_CONFIG": json.dumps({"cluster": cluster, "task": t})} for t in tasks]


def _start(envs, order, stagger, args, logs):
    base = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""), TF_CPP_MIN_LOG_LEVEL="2")
    procs, started = {}, {}
    for k, rank in enumerate(order):
        if k:
            time.sleep(stagger)
        started[rank] = time.monotonic()
        procs[rank] = subprocess.Popen([sys.executable, SCRIPT] + args, env=dict(base, **envs[rank]),
                                       stdout=open(logs[rank], "w"), stderr=subprocess.STDOUT, start_new_session=True)
    return procs, started


def _read(path):
    with open(path) as f:
        return f.read()


def one_round(nodes, stagger, seed, tmp):
    envs = _envs(nodes)
    order = random.Random(seed).sample(range(nodes), nodes)
    logs = {r: os.path.join(tmp, "r{}-{}.log".format(seed, r)) for r in range(nodes)}
    procs, started = _start(envs, order, stagger, ["--steps", "400", "--sleep", "0.05"], logs)
    up, deadline = {}, time.monotonic() + 300
    try:
        while len(up) < nodes and time.monotonic() < deadline:
            for rank in range(nodes):
                if rank not in up and "processes up" in _read(logs[rank]):
                    up[rank] = time.monotonic()
            time.sleep(0.05)
        while "STEP 20" not in _read(logs[0]) and time.monotonic() < deadline:
            time.sleep(0.05)
        killed = time.monotonic()
        os.killpg(procs[1].pid, signal.SIGKILL)
        ends = {}
        while len(ends) < nodes - 1 and time.monotonic() < deadline:
            for rank, proc in procs.items():
                if rank != 1 and rank not in ends and proc.poll() is not None:
                    ends[rank] = (time.monotonic(), proc.returncode)
            time.sleep(0.05)
        return {"startup_s": max(up.values()) - min(started.values()), "stop_s": max(t for t, _ in ends.values()) - killed,
                "statuses": sorted(code for _, code in ends.values()), "order": order}
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--stagger", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    import tempfile
    print("load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(args.rounds):
            row = one_round(args.nodes, args.stagger, seed, tmp)
            rows.append(row)
            print("round {}: start order {}, first start -> last up {:.1f} s (stagger {:.1f} s x {}); kill -> last "
                  "exit {:.1f} s, statuses {}".format(seed + 1, row["order"], row["startup_s"], args.stagger,
                                                       args.nodes - 1, row["stop_s"], row["statuses"]))
    save("join_times", {"nodes": args.nodes, "stagger_s": args.stagger, "rounds": rows})


if __name__ == "__main__":
    main()

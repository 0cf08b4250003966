"""Per fault: time to detect, time to resume, steps lost, and whether the final variables match.

    python benchmarks/survival.py                      # every fault
    python benchmarks/survival.py --faults kill-worker --steps 40

Each fault runs ``examples/unmodified_train.py --session monitored`` under
``autodist run --max-restarts 1`` on ``resource_specs/loopback_two_nodes.yml``
(AllReduce, a checkpoint every ``--save-steps`` steps, ``--step-sleep`` s per
step so that the fault lands mid-run) and makes it happen after the other
node's step ``--at``:

    kill-worker     SIGKILL to the other node's training script
    stop-worker     SIGSTOP to it (a stall; --stall-timeout 10)
    sigterm-chief   SIGTERM to the attempt's chief (no restart: a last checkpoint, status 143)
    shrink          as kill-worker, with --min-nodes 1 and the spec rewritten first so that
                    127.0.0.2 is reached over SSH at a closed port: the relaunch leaves it out
                    and resumes on one node
    kill-worker-api as kill-worker for an API script (``tests/job/scripts/job_resume.py``:
                    ``AutoDist(max_restarts=1, checkpoint_dir=, save_every=)``), after the
                    chief's global step ``--at``

Reported: detect = fault -> the ``restart`` (or ``saved checkpoint``) line, printed once
the failed attempt is torn down;
resume = fault -> the ``resuming from checkpoint`` line; lost = the chief's
steps before the fault minus the step resumed from (for sigterm: the steps
run minus the step saved); match = the final ``weights`` equal the example
trained alone on the whole batch (rtol 1e-4). Processes are found, and
leftovers killed, by job id only.
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "job"))   # this script's directory is on sys.path already

from _results import save  # noqa: E402
from jobtools import Chief, job_processes, unreachable_second_node  # noqa: E402

SPEC = os.path.join(REPO, "resource_specs", "loopback_two_nodes.yml")
EXAMPLE = os.path.join(REPO, "examples", "unmodified_train.py")
API_SCRIPT = os.path.join(REPO, "tests", "job", "scripts", "job_resume.py")
ONE_NODE = os.path.join(REPO, "resource_specs", "single_node_cpu.yml")
FAULTS = ("kill-worker", "stop-worker", "sigterm-chief", "shrink", "kill-worker-api")


def _weights(text):
    lines = [line for line in text.splitlines() if line.startswith("weights ")]
    return json.loads(lines[-1][len("weights "):]) if lines else None


def _worker_script(job_id):
    """The process group of the other node's training script, found by the job id."""
    for pid in job_processes(job_id):
        with open("/proc/{}/cmdline".format(pid), "rb") as f:
            command = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
        if "python" in command.split()[0] and os.getpgid(pid) == pid:
            return pid
    raise RuntimeError("no training script of job {}".format(job_id))


def _reference(fault, steps):
    """The final weights of the same training, uninterrupted, in one process."""
    if fault == "kill-worker-api":
        argv = [API_SCRIPT, ONE_NODE, tempfile.mkdtemp(prefix="survival-ref-"), "--steps", str(steps)]
    else:
        argv = [EXAMPLE, "--session", "monitored", "--steps", str(steps)]
    done = subprocess.run([sys.executable] + argv, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    return _weights(done.stdout)


def _start(fault, args, ckpt, spec):
    """The supervised chief for ``fault`` and the line after which the fault comes."""
    if fault == "kill-worker-api":
        return Chief([API_SCRIPT, spec, ckpt, "--steps", str(args.steps), "--save-every", str(args.save_steps),
                      "--max-restarts", "1", "--step-sleep", str(args.step_sleep)]), r"^step {} loss".format(args.at)
    shrink = ["--min-nodes", "1"] if fault == "shrink" else []
    return Chief(["-m", "autodist", "run", "-r", spec, "-s", "AllReduce", "--max-restarts", "1",
                  "--restart-backoff", "1", "--stall-timeout", "10"] + shrink + [
                      EXAMPLE, "--session", "monitored", "--steps", str(args.steps), "--save-steps",
                      str(args.save_steps), "--step-sleep", str(args.step_sleep), "--checkpoint-dir", ckpt]), \
        r"\[127\.0\.0\.2\] step {} loss".format(args.at)


def measure(fault, args, reference):
    ckpt = tempfile.mkdtemp(prefix="survival-")
    spec = os.path.join(ckpt, "spec.yml")
    shutil.copyfile(SPEC, spec)
    chief, after = _start(fault, args, os.path.join(ckpt, "ckpt"), spec)
    try:
        chief.wait_for(after, 300)
        job_id = chief.job_id
        ran = len(re.findall(r"(?m)^step \d+ loss", chief.output()))
        at = time.monotonic()
        if fault == "sigterm-chief":   # to `autodist run`, which passes it to the attempt
            chief.signal(signal.SIGTERM)
        else:
            if fault == "shrink":
                unreachable_second_node(spec)
            os.killpg(_worker_script(job_id), signal.SIGSTOP if fault == "stop-worker" else signal.SIGKILL)
        code = chief.wait(args.limit)
        detect = chief.find(r"\[autodist\] (restart 1 of 1|saved checkpoint)")
        resumed = chief.find(r"resuming from checkpoint \S+ \(global step (\d+)\)")
        saved = chief.find(r"saved checkpoint \S+ \(global step (\d+)\)")
        base = int(resumed[1].group(1)) if resumed else (int(saved[1].group(1)) if saved else None)
        weights = _weights(chief.output())
        match = (weights is not None and all(np.allclose(weights[k], reference[k], rtol=1e-4, atol=1e-5)
                                             for k in reference))
        return {"fault": fault, "code": code, "detect_s": detect[0] - at if detect else None,
                "resume_s": resumed[0] - at if resumed else None,
                "lost": abs(ran - base) if base is not None else None,
                "match": match if fault != "sigterm-chief" else None,
                "left": sum(len(job_processes(j)) for j in set(re.findall(r"job (\S+): \d+ nodes", chief.output())))}
    finally:
        chief.cleanup()
        for job_id in set(re.findall(r"job (\S+): \d+ nodes", chief.output())):
            for pid in job_processes(job_id):
                os.kill(pid, signal.SIGKILL)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--faults", nargs="*", default=list(FAULTS), choices=FAULTS)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--save-steps", type=int, default=5)
    parser.add_argument("--step-sleep", type=float, default=0.3)
    parser.add_argument("--at", type=int, default=12, help="the other node's step after which the fault comes")
    parser.add_argument("--limit", type=float, default=300.0)
    args = parser.parse_args()
    references = {}
    rows = []
    print("{:<16} {:>5} {:>9} {:>9} {:>5} {:>6} {:>5}".format("fault", "code", "detect s", "resume s", "lost",
                                                               "match", "left"))
    for fault in args.faults:
        family = "api" if fault == "kill-worker-api" else "run"
        if family not in references:
            references[family] = _reference(fault, args.steps)
        row = measure(fault, args, references[family])
        rows.append(row)
        print("{:<16} {:>5} {:>9} {:>9} {:>5} {:>6} {:>5}".format(
            fault, str(row["code"]), *("-" if row[k] is None else "{:.1f}".format(row[k])
                                       for k in ("detect_s", "resume_s")),
            str(row["lost"]), str(row["match"]), row["left"]), flush=True)
    save("survival", {"steps": args.steps, "save_steps": args.save_steps, "rows": rows})


if __name__ == "__main__":
    main()

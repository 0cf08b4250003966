"""A planted crash for the pools' own test (test_eq_pools.py): one node of a case dies as a crashed or OOM-killed
TensorFlow process does, the others stay in the case as if waiting in a collective."""
import os
import signal
import sys
import time


def run_node(case, address, servers, chief, spec_path, rows):
    """``case["dies"]`` prints a line and is killed (SIGKILL); any other node stays a minute, then writes
    ``case["finished"]`` (so a pool that waited for it would be seen to have)."""
    if address == case["dies"]:
        print("planted: node {} dies in its case".format(address), file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)
    with open(case["finished"], "w") as f:
        f.write(address)
    return [], []

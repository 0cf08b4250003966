"""A node's ``cores`` pin every thread of its processes (runtime.launch.server.pin_to_cores)."""
import os
import subprocess
import sys
import textwrap

import pytest

from autodist.errors import ResourceSpecError
from autodist.runtime.launch.server import pin_to_cores

PROBE = textwrap.dedent("""
    import os, sys, threading
    from autodist.runtime.launch.server import pin_to_cores
    started, stop = threading.Barrier(3), threading.Event()
    def idle():
        started.wait()
        stop.wait()
    threads = [threading.Thread(target=idle) for _ in range(2)]
    for t in threads:
        t.start()
    started.wait()
    pin_to_cores([int(sys.argv[1])])
    later = []
    t = threading.Thread(target=lambda: later.append(sorted(os.sched_getaffinity(0))))
    t.start(); t.join()
    masks = {tid: sorted(os.sched_getaffinity(int(tid))) for tid in os.listdir("/proc/self/task")}
    stop.set()
    print(len(masks), sorted(set(map(tuple, masks.values()))), later)
""")


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to tell pinned from not")
def test_every_thread_and_every_later_thread_is_pinned():
    core = sorted(os.sched_getaffinity(0))[-1]
    out = subprocess.run([sys.executable, "-c", PROBE, str(core)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    count, masks, later = out.stdout.split(" ", 2)
    assert int(count) >= 3 and masks == "[({},)]".format(core) and later.strip() == "[[{}]]".format(core)


def test_no_cores_leaves_the_process_alone_and_a_missing_core_names_the_key():
    before = os.sched_getaffinity(0)
    pin_to_cores(())
    assert os.sched_getaffinity(0) == before
    with pytest.raises(ResourceSpecError, match=r"node 10\.0\.0\.2:4711: cannot pin its processes to cores "
                                                r"\[4096\].*fix the node's 'cores'"):
        pin_to_cores([4096], "10.0.0.2:4711")
    assert os.sched_getaffinity(0) == before

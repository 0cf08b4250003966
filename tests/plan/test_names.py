"""names: every name the rewritten graph uses, and the device strings it is placed on."""
import subprocess
import sys

import pytest

from autodist.plan import names


def test_replica_shard_and_proxy_names():
    assert names.replica_prefix(1) == "AutoDist-Replica-1/"
    assert names.single_device_name("AutoDist-Replica-1/dense/MatMul:0") == "dense/MatMul:0"
    assert names.single_device_name("W/part_0:0") == "W/part_0:0"
    assert names.shard_name("scope/emb", 3) == "scope/emb/part_3"
    assert names.proxy_name("W") == names.proxy_scope("W") + names.PROXY_HANDLE == "AutoDist-Proxy/W/proxy"
    assert names.INIT_OPS == ("AutoDist-Init/servers", "AutoDist-Init/sync", "AutoDist-Init/local")
    assert names.job_container("j1") == "autodist-j1"


def test_device_strings_and_their_tasks():
    assert names.worker_device(2, "GPU", 1) == "/job:worker/task:2/device:GPU:1"
    assert names.host_cpu(3) == "/job:worker/task:3/device:CPU:0"
    assert names.collective_group_leader(1) == "/job:worker/replica:0/task:1"
    assert names.task_of(names.worker_device(12, "CPU", 0)) == 12


@pytest.mark.parametrize("device", ["/job:worker/task:0/cpu:0", "10.0.0.1:CPU:0", "/job:ps/task:0/device:CPU:0", ""])
def test_only_compiled_device_names_have_a_task(device):
    with pytest.raises(ValueError, match="is not a compiled device name"):
        names.task_of(device)


def test_collective_keys_of_a_job():
    assert names.key_base("any", explicit=700000) == 700000
    derived = names.key_base("job-1")
    assert derived == names.key_base("job-1") and derived % names.KEY_WINDOW == 0 and derived > 0
    assert names.group_key(derived) == derived // names.KEY_WINDOW
    assert len({names.key_base("job-{}".format(i)) for i in range(5)}) > 1
    # training keys, then initialization, then checkpoint restores, all inside the window
    assert 0 < names.INIT_KEY_OFFSET < names.RESTORE_KEY_OFFSET < names.KEY_WINDOW


def test_the_key_windows_tile_a_jobs_keys():
    """Training, synchronized batch-norm statistics, every-step, init and restore keys follow one another from the key base's first key to the next
    job's key base; the restore slots fit theirs."""
    windows = names.KEY_WINDOWS
    assert [w for w, _, _ in windows] == ["training", "statistics", "every-step", "init", "restore"]
    assert windows[0][1] == 1 and windows[-1][2] == names.KEY_WINDOW
    assert all(end <= first for (_, _, end), (_, first, _) in zip(windows, windows[1:]))
    assert [names.key_window(w) for w, _, _ in windows] == [(1, 70000), (70000, 80000), (80001, 90000),
                                                            (90000, 95000), (95000, 100000)]
    with pytest.raises(ValueError, match="no collective key window 'trainig'; the windows are training, statistics"):
        names.key_window("trainig")


def test_names_and_contract_do_not_import_tensorflow():
    code = "import sys, autodist.plan.names, autodist.plan.contract; sys.exit('tensorflow' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], timeout=120).returncode == 0

"""A three-node job: the chief on 127.0.0.1, 127.0.0.2 and 127.0.0.3 over SSH (loopback sshd)."""
import os
import shutil

import numpy as np
import pytest

from jobtools import SCRIPTS, assert_only_logs_left, job_processes, linear_reference

pytestmark = [pytest.mark.slow, pytest.mark.ssh]

# Reach the other nodes through a remote shell: each must arrive verbatim, never run.
HOSTILE = {
    "AD_QUOTES": "it's \"quoted\" \\ back\\slash",
    "AD_SUBST": "$(touch {canary}) `touch {canary}` ${{HOME}} $HOME",
    "AD_NEWLINE": "first line\nsecond; touch {canary} && echo |cat",
    "AD_SPACES": "  leading and trailing  ",
}


def test_three_nodes_over_ssh_train_like_one_device_with_hostile_env_and_paths(ssh_spec, chiefs, tmp_path):
    canary = str(tmp_path / "canary")
    env = {k: v.format(canary=canary) for k, v in HOSTILE.items()}
    spec = ssh_spec(shared_envs=env)
    # The script and the working directory (the nodes' cwd) have shell-hostile names too.
    mark = "autodist-canary-" + os.path.basename(str(tmp_path))
    workdir = tmp_path / "run dir $(touch {0}) `touch {0}` 'q'".format(mark)
    workdir.mkdir()
    script = workdir / "job linear.py"
    shutil.copy(os.path.join(SCRIPTS, "job_linear.py"), script)
    chief = chiefs([str(script), spec, "--steps", "3", "--echo-env"] + sorted(env), cwd=str(workdir))
    assert chief.wait(150) == 0, chief.output()[-4000:]
    results = chief.results()
    assert set(results) == {None, "127.0.0.2", "127.0.0.3"}, chief.output()[-4000:]
    losses, w = linear_reference(seed=0, steps=3)
    ordered = sorted(results.values(), key=lambda r: r["index"])
    assert [r["index"] for r in ordered] == [0, 1, 2]
    for step in range(3):
        got = [v for r in ordered for v in r["losses"][step]]
        np.testing.assert_allclose(got, losses[step], rtol=1e-5, atol=1e-6)
    for r in ordered:
        np.testing.assert_allclose(r["w"], w, rtol=1e-5, atol=1e-6)
    for remote in ("127.0.0.2", "127.0.0.3"):
        assert results[remote]["env"] == env
    for where in (canary, os.path.expanduser("~/" + mark), str(tmp_path / mark), str(workdir / mark)):
        assert not os.path.exists(where)
    assert job_processes(chief.job_id) == []
    assert_only_logs_left(chief.job_id)

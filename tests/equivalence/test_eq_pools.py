"""A pool whose node dies fails that test with the node's own end, and the next test runs on a new pool (a dead
node used to leave its pool to fail every later test of the topology with BrokenPipeError)."""
import os
import signal

import pytest

import eq_harness as harness
import test_equivalence

TOPOLOGY = "2nodes-1+1"


@pytest.mark.slow
@pytest.mark.pool(TOPOLOGY)
def test_a_node_that_dies_fails_its_case_and_the_next_case_runs(pools, tmp_path):
    pool = pools(TOPOLOGY)
    idle = pool.nodes[1]
    os.kill(idle.process.pid, signal.SIGKILL)   # between two cases, as the OOM killer would
    idle.process.join(30)
    case = harness.new_case("AllReduce", "linreg", tmp_path)
    with pytest.raises(harness.NodeDied, match=r"pool node 127\.0\.0\.2 \(pid {}\) ended during case {} \(AllReduce "
                                               r"on linreg\) with signal 9 \(SIGKILL\)".format(idle.process.pid,
                                                                                            case["job_id"])):
        pool.run(case, test_equivalence._rows(TOPOLOGY))
    assert not pool.alive

    crashing = pools(TOPOLOGY)
    assert crashing is not pool and crashing.alive
    finished = tmp_path / "finished"
    case = harness.new_case(None, None, tmp_path, module="eq_crash", dies="127.0.0.1", finished=str(finished))
    with pytest.raises(harness.NodeDied, match=r"(?s)pool node 127\.0\.0\.1 .* with signal 9 \(SIGKILL\); the last "
                                               r"lines of its output .*127\.0\.0\.1\.log.*planted: node 127\.0\.0\.1 "
                                               r"dies in its case"):
        crashing.run(case, {"127.0.0.1": None, "127.0.0.2": None})
    assert not finished.exists(), "the pool waited for the node that did not die before it failed the case"
    assert not crashing.alive

    fresh = pools(TOPOLOGY)
    assert fresh not in (pool, crashing) and fresh.alive
    os.kill(fresh.nodes[0].process.pid, signal.SIGKILL)   # between two tests: no case sees it, the fixture says it
    fresh.nodes[0].process.join(30)
    with pytest.warns(UserWarning, match=r"the 2nodes-1\+1 pool's node\(s\) 127\.0\.0\.1 \(pid \d+, signal 9 "
                                         r"\(SIGKILL\)\) ended between two tests; starting its nodes again"):
        assert pools(TOPOLOGY) is not fresh
    (tmp_path / "next").mkdir()
    test_equivalence.test_equivalent_to_single_device("AllReduce", "linreg", TOPOLOGY, pools, tmp_path / "next")

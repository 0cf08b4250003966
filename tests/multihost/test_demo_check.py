"""The two-host demo's check tells 29 steps from 30 (``demo_check``; the run itself: ``test_multihost_jobs.py``)."""
import pytest

import demo_check


def test_the_run_it_expects_passes():
    assert len(demo_check.check(*demo_check.printed(30, 2), steps=30, nodes=2)) == 2


def test_a_lost_step_fails():
    with pytest.raises(AssertionError):
        demo_check.check(*demo_check.printed(29, 2), steps=30, nodes=2)


def test_a_lost_step_fails_on_the_printed_weights_alone():
    output, _ = demo_check.printed(29, 2)
    _, log = demo_check.printed(30, 2)
    with pytest.raises(AssertionError, match="weights|bias"):
        demo_check.check(output, log, steps=30, nodes=2)


def test_a_repeated_batch_fails_on_the_loss_log():
    output, log = demo_check.printed(30, 2)
    losses = [line.split()[1] for line in log.splitlines()]
    repeated = losses[:10] + losses[9:29]   # step 10's batch twice, everything after one step late
    with pytest.raises(AssertionError, match="loss per step"):
        demo_check.check(output, "".join("{} {}\n".format(i + 1, v) for i, v in enumerate(repeated)), 30, 2)


def test_a_missing_node_fails():
    output, log = demo_check.printed(30, 2)
    with pytest.raises(AssertionError):
        demo_check.check(output.splitlines()[0], log, steps=30, nodes=2)

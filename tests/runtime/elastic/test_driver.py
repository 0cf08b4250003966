"""The elastic supervisor's decisions, with stand-in attempts (no TensorFlow, no job).

Each attempt is a small script that logs the settings it was started with
and ends as the test's plan says: a preemption notice seen (RESIZED with an
outcome naming the node that left), a node failure (NODE_FAILED with the
error line a chief prints), or success. The whole loop with real jobs is
``tests/job/test_elastic_jobs.py``.
"""
import json
import os
import sys
import textwrap

from autodist.runtime.elastic import ElasticSettings, supervise_elastic
from autodist.runtime.elastic.protocol import RESIZED
from autodist.runtime.recovery.restart import EXIT_RESTARTS_EXHAUSTED, NODE_FAILED
from autodist.spec.resource_spec import ResourceSpec

ATTEMPT = textwrap.dedent("""
    import json, os, sys, time
    settings = json.loads(os.environ["AUTODIST_ELASTIC"])
    number = int(os.environ["AUTODIST_ATTEMPT"])
    with open(sys.argv[1], "a") as log:
        log.write(json.dumps(dict(settings, attempt=number)) + "\\n")
    action = sys.argv[2].split(",")[number - 1]
    if action == "preempted":
        with open(os.path.join(settings["control"], "outcome.json"), "w") as f:
            json.dump({{"change": settings["next_change"], "leaving": ["127.0.0.2"], "at": time.time(), "step": 5,
                       "what": "127.0.0.2 leaves after a preemption notice (SIGTERM)"}}, f)
        sys.exit({resized})
    if action == "failed":
        print("autodist: error: worker on 127.0.0.2 failed: its training script exited with code 1", file=sys.stderr)
        sys.exit({failed})
    if action == "exit79":   # the script's own status, which happens to be RESIZED's
        sys.exit({resized})
    if action == "watch":   # a job of 4 s that stops for a requested change, as an attempt's chief does
        request = os.path.join(settings["control"], "request.json")
        for _ in range(40):
            if os.path.exists(request):
                with open(request) as f:
                    asked = json.load(f)
                with open(os.path.join(settings["control"], "outcome.json"), "w") as f:
                    json.dump(dict(asked, leaving=[], step=3), f)
                sys.exit({resized})
            time.sleep(0.1)
""").format(resized=RESIZED, failed=NODE_FAILED)

SPEC = ResourceSpec.from_dict({"nodes": [{"address": "127.0.0.1", "chief": True}, {"address": "127.0.0.2"},
                                         {"address": "127.0.0.3"}]}, path="spec.yml")


def _supervise(tmp_path, plan, capsys, **settings):
    script = tmp_path / "attempt.py"
    script.write_text(ATTEMPT)
    log = tmp_path / "attempts.log"
    status = supervise_elastic([sys.executable, str(script), str(log), ",".join(plan)], SPEC,
                               ElasticSettings(host_backoff=600.0, restart_backoff=0.0, **settings))
    attempts = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return status, attempts, capsys.readouterr().out


def test_a_preempted_node_is_set_aside_and_the_job_goes_on_without_it(tmp_path, capsys):
    status, attempts, out = _supervise(tmp_path, ["preempted", "ok"], capsys)
    assert status == 0
    assert [a["nodes"] for a in attempts] == [["127.0.0.1", "127.0.0.2", "127.0.0.3"], ["127.0.0.1", "127.0.0.3"]]
    change = attempts[1]["change"]
    assert (change["number"], change["step"]) == (1, 5) and "preemption notice" in change["what"]
    assert attempts[1]["previous"] == attempts[0]["nodes"]
    assert "[autodist] elastic: 127.0.0.2 set aside for 600 s (failure 1: a preemption notice)" in out
    assert "restart" not in out                           # a membership change is not a failure


def test_with_fewer_than_min_nodes_left_the_supervisor_exits_with_the_retry_status(tmp_path, capsys):
    status, attempts, out = _supervise(tmp_path, ["preempted"], capsys, min_nodes=3)
    assert status == NODE_FAILED and len(attempts) == 1
    assert "elastic: 2 node(s) available (127.0.0.1, 127.0.0.3), fewer than min_nodes 3; the job stops here" in out


def test_a_failure_is_counted_and_its_host_set_aside(tmp_path, capsys):
    status, attempts, out = _supervise(tmp_path, ["failed", "failed"], capsys, max_restarts=1)
    assert status == EXIT_RESTARTS_EXHAUSTED
    assert [a["nodes"] for a in attempts] == [["127.0.0.1", "127.0.0.2", "127.0.0.3"], ["127.0.0.1", "127.0.0.3"]]
    assert "elastic: 127.0.0.2 set aside for 600 s (failure 1: worker on 127.0.0.2 failed" in out
    assert "[autodist] restart 1 of 1 in 0 s: attempt 1" in out
    assert "the job failed 2 time(s), no restart left (max_restarts 1)" in out


def test_a_failing_discovery_script_is_reported_and_the_chief_starts_alone(tmp_path, capsys):
    script = tmp_path / "hosts.sh"
    script.write_text("#!/bin/sh\necho inventory down >&2\nexit 2\n")
    script.chmod(0o755)
    status, attempts, out = _supervise(tmp_path, ["ok"], capsys, discovery_script=str(script))
    assert status == 0 and attempts[0]["nodes"] == ["127.0.0.1"]
    assert "elastic: the discovery script failed (it exited with code 2: inventory down); the hosts found before " \
           "stay: none yet" in out


def test_a_scripts_own_status_79_ends_the_job_instead_of_relaunching_it(tmp_path, capsys):
    # before: taken for a membership change, relaunched without a bound
    status, attempts, out = _supervise(tmp_path, ["exit79", "ok"], capsys)
    assert status == RESIZED and len(attempts) == 1
    assert "elastic: attempt 1 exited with status {} but made no membership change: it is the script's own " \
           "status".format(RESIZED) in out


def _hosts_script(tmp_path, *answers):
    """A discovery script that prints ``answers`` in turn, one a run, the last one from then on."""
    count, script = tmp_path / "runs", tmp_path / "hosts.sh"
    lines = "".join('  {}) printf "{}";;\n'.format(i, a.replace("\n", "\\n")) for i, a in enumerate(answers[:-1]))
    script.write_text('#!/bin/sh\nn=$(cat {0} 2>/dev/null || echo 0)\necho $((n + 1)) > {0}\ncase $n in\n{1}'
                      '  *) printf "{2}";;\nesac\n'.format(count, lines, answers[-1].replace("\n", "\\n")))
    script.chmod(0o755)
    return str(script)


def test_a_host_that_comes_and_goes_at_every_run_changes_nothing(tmp_path, capsys):
    flip = ["127.0.0.1\n127.0.0.2\n", "127.0.0.1\n"] * 30
    status, attempts, out = _supervise(tmp_path, ["watch"], capsys, discovery_script=_hosts_script(tmp_path, *flip),
                                       interval=0.1, settle=1.0)
    assert status == 0 and len(attempts) == 1, out   # before: a change at the next run, again and again
    assert "membership change" not in out


def test_a_host_that_stays_listed_for_the_settle_time_joins(tmp_path, capsys):
    hosts = _hosts_script(tmp_path, "127.0.0.1\n", "127.0.0.1\n127.0.0.3\n")
    status, attempts, out = _supervise(tmp_path, ["watch", "ok"], capsys, interval=0.1, settle=0.5,
                                       discovery_script=hosts)
    assert status == 0 and [a["nodes"] for a in attempts] == [["127.0.0.1"], ["127.0.0.1", "127.0.0.3"]], out
    assert "[autodist] membership change 1: 127.0.0.3 joins;" in out

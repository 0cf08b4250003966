"""shell.py: what we send to a remote shell arrives verbatim and is never executed.

The round trips run the built command through real ``bash -c`` and ``sh -c``
locally (the same parsing an SSH server's login shell does), with stdin kept
open as an SSH channel keeps it.
"""
import json
import os
import random
import signal
import subprocess
import sys

import pytest

from autodist.runner import shell

ECHO = ("import json, os, sys; keys = os.environ.get('CHECK_KEYS', '').split(','); "
        "print(json.dumps({'argv': sys.argv[1:], 'cwd': os.getcwd(), "
        "'env': {k: os.environ.get(k) for k in keys if k}}))")

# A program with a SIGTERM handler (as a training script may have): stopped, it acts on the TERM only
# once it runs again (a signal whose default action kills would end even a stopped process).
TERM_HANDLER = [sys.executable, "-c", "import signal, sys, time; signal.signal(signal.SIGTERM, lambda *a: "
                "sys.exit(7)); print('ready', flush=True); time.sleep(300)"]

HOSTILE = [
    "plain", "two words", "  leading and trailing  ", "", "'", '"', "''", '"\'"', "\\", "\\'",
    "$(touch /tmp/autodist-pwned)", "`touch /tmp/autodist-pwned`", "$HOME", "${HOME}", "$$",
    "a;b", "a && b", "a || b", "a | b", "a > /tmp/x", "< /etc/passwd", "&", "#comment",
    "line1\nline2", "\n", "tab\there", "\r\n", "*", "?", "[a-z]", "~", "~/x", "!", "!!",
    "-n", "--", "-e", "%s %d", "{a,b}", "é☃𝄞 — unicode", "\u202e\u200b", "'; rm -rf / #",
]


def hostile_cases(seed, count):
    """Random strings glued from the hostile fragments and random code points."""
    rng = random.Random(seed)
    alphabet = "ab $`'\"\\;&|<>(){}[]*?!~#\n\t\r=%-é☃𝄞\u00a0"
    for _ in range(count):
        pieces = [rng.choice(HOSTILE) for _ in range(rng.randint(1, 4))]
        pieces.append("".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12))))
        rng.shuffle(pieces)
        yield "".join(pieces)


def run_through(shell_binary, command, timeout=20):
    """Run ``command`` with ``<shell> -c`` keeping stdin open until it exits."""
    proc = subprocess.Popen([shell_binary, "-c", command], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err = proc.stdout.read(), proc.stderr.read()
        code = proc.wait(timeout)
    finally:
        proc.stdin.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
    return code, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


def echo_back(shell_binary, args, env, cwd=None, prefix=None):
    env = dict(env, CHECK_KEYS=",".join(env))
    command = shell.remote_command([sys.executable, "-c", ECHO] + list(args), env=env, cwd=cwd,
                                   prefix=prefix)
    code, out, err = run_through(shell_binary, command)
    assert code == 0, (out, err)
    marker, payload = out.split("\n", 1)
    assert shell.parse_pgid_line(marker) is not None
    return json.loads(payload)


@pytest.mark.parametrize("shell_binary", ["bash", "sh"])
def test_hostile_argv_and_env_arrive_verbatim(shell_binary):
    args = list(HOSTILE) + list(hostile_cases(seed=7, count=30))
    env = {"V{}".format(i): value for i, value in enumerate(hostile_cases(seed=11, count=30))}
    env.update({"H{}".format(i): value for i, value in enumerate(HOSTILE)})
    got = echo_back(shell_binary, args, env)
    assert got["argv"] == args
    assert got["env"] == env
    assert not os.path.exists("/tmp/autodist-pwned")


@pytest.mark.parametrize("seed", range(5))
def test_random_hostile_strings_round_trip(seed):
    args = list(hostile_cases(seed=100 + seed, count=20))
    env = {"K{}".format(i): v for i, v in enumerate(hostile_cases(seed=200 + seed, count=20))}
    got = echo_back("sh", args, env)
    assert (got["argv"], got["env"]) == (args, env)


@pytest.mark.parametrize("name", ["dir with spaces", "q'uote", "$(touch pwned)", "new\nline",
                                  "`id`", "é☃"], ids=["spaces", "quote", "subst", "newline",
                                                      "backtick", "unicode"])
def test_cwd_arrives_verbatim(tmp_path, name):
    target = tmp_path / name
    target.mkdir()
    got = echo_back("bash", [], {}, cwd=str(target))
    assert got["cwd"] == str(target)
    assert sorted(os.listdir(tmp_path)) == [name]


@pytest.mark.parametrize("prefix", ["export FROM_PREFIX=venv", "export FROM_PREFIX=venv;",
                                    "true\nexport FROM_PREFIX=venv  "],
                         ids=["plain", "semicolon", "multi-line"])
def test_prefix_runs_as_given_before_the_command(prefix):
    command = shell.remote_command([sys.executable, "-c", ECHO],
                                   env={"CHECK_KEYS": "FROM_PREFIX,OVERRIDDEN",
                                        "OVERRIDDEN": "env"},
                                   prefix=prefix + "\nexport OVERRIDDEN=venv")
    code, out, err = run_through("bash", command)
    assert code == 0, err
    # The prefix's exports are seen; the call's env is applied after it and wins.
    assert json.loads(out.split("\n", 1)[1])["env"] == {"FROM_PREFIX": "venv",
                                                        "OVERRIDDEN": "env"}


def test_failing_prefix_stops_before_the_command():
    command = shell.remote_command(["echo", "must-not-run"], prefix="exit 9")
    code, out, _ = run_through("bash", command)
    assert code == 9
    assert "must-not-run" not in out and shell.PGID_MARKER not in out


def test_exit_code_and_signal_death_follow_the_shell_convention():
    code, _, _ = run_through("bash", shell.remote_command(["sh", "-c", "exit 7"]))
    assert code == 7
    code, out, _ = run_through("bash", shell.remote_command(["sh", "-c", "kill -TERM $$"]))
    assert code == 128 + signal.SIGTERM
    assert out.startswith(shell.PGID_MARKER)


@pytest.mark.parametrize("key", ["", "1A", "A-B", "A B", "A=B", "É", "A\n", None, 3])
def test_invalid_environment_names_are_rejected_by_name(key):
    with pytest.raises(ValueError) as info:
        shell.remote_command(["true"], env={key: "v"})
    assert repr(key) in str(info.value)


@pytest.mark.parametrize("argv,env", [(["a\0b"], None), (["x"], {"K": "a\0"}), ([], None),
                                      ("ls -l", None), ([""], None)],
                         ids=["nul-arg", "nul-env", "empty", "string", "empty-program"])
def test_unsendable_commands_are_rejected(argv, env):
    with pytest.raises(ValueError):
        shell.remote_command(argv, env=env)


def test_parse_pgid_line():
    assert shell.parse_pgid_line("{} 1234".format(shell.PGID_MARKER)) == 1234
    for line in ["1234", "{} x".format(shell.PGID_MARKER), "{} 1".format(shell.PGID_MARKER),
                 "say {} 12".format(shell.PGID_MARKER), ""]:
        assert shell.parse_pgid_line(line) is None


@pytest.mark.parametrize("pgid", [0, 1, -1, -5, True, "12", 3.0, None])
def test_kill_command_refuses_anything_but_a_real_group(pgid):
    with pytest.raises(ValueError):
        shell.kill_command(pgid)


def _kill_group(proc):
    """Clean up after a test: KILL the group ``proc`` leads if it still runs."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)


def _kill_wrapped(proc, pgid, group_pids):
    """Clean up after a watchdog test: the local shell ``proc`` and the wrapped group ``pgid``."""
    if proc.poll() is None:
        proc.kill()
        proc.wait(5)
    if pgid and group_pids(pgid):
        os.killpg(pgid, signal.SIGKILL)


def test_kill_command_stops_the_whole_group(group_pids, poll_until):
    proc = subprocess.Popen(["sh", "-c", "sleep 300 & sleep 300 & wait"],
                            start_new_session=True)
    try:
        assert poll_until(lambda: len(group_pids(proc.pid)) == 3)
        # The leader stays a zombie until proc.wait() below: the kill waits out its grace.
        subprocess.run(["sh", "-c", shell.kill_command(proc.pid, grace=1.0)], timeout=20,
                       check=True)
        assert proc.wait(10) == -signal.SIGTERM
        assert poll_until(lambda: not group_pids(proc.pid))
    finally:
        _kill_group(proc)


def test_kill_command_escalates_to_kill_after_grace(group_pids, poll_until):
    proc = subprocess.Popen(["sh", "-c", "trap '' TERM; sleep 300 & wait"],
                            start_new_session=True)
    try:
        assert poll_until(lambda: len(group_pids(proc.pid)) == 2)
        subprocess.run(["sh", "-c", shell.kill_command(proc.pid, grace=0.5)], timeout=20,
                       check=True)
        assert proc.wait(10) == -signal.SIGKILL
        assert poll_until(lambda: not group_pids(proc.pid))
    finally:
        _kill_group(proc)


def test_kill_command_wakes_a_stopped_group_so_that_it_acts_on_the_term(group_pids, poll_until):
    """A node stopped with SIGSTOP (a stall) would sit on the TERM until the KILL: it gets SIGCONT."""
    proc = subprocess.Popen(TERM_HANDLER, start_new_session=True, stdout=subprocess.PIPE)
    try:
        assert proc.stdout.readline() == b"ready\n"
        os.killpg(proc.pid, signal.SIGSTOP)
        killer = subprocess.Popen(["sh", "-c", shell.kill_command(proc.pid, grace=30.0)])
        assert proc.wait(10) == 7   # its handler ran, well within the 30 s grace: no KILL was needed
        assert killer.wait(10) == 0   # the leader reaped, the kill stops waiting
        assert poll_until(lambda: not group_pids(proc.pid))
    finally:
        _kill_group(proc)


def test_the_watchdog_wakes_a_stopped_program_when_the_connection_closes(group_pids, poll_until):
    command = shell.remote_command(TERM_HANDLER, grace=30.0)
    proc = subprocess.Popen(["bash", "-c", command], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    pgid = None
    try:
        pgid = shell.parse_pgid_line(proc.stdout.readline().decode())
        assert proc.stdout.readline() == b"ready\n"
        os.kill(pgid, signal.SIGSTOP)   # the program, not its watchdog
        proc.stdin.close()
        assert proc.wait(10) == 7   # its handler ran, well within the 30 s grace
        assert poll_until(lambda: not group_pids(pgid))
    finally:
        _kill_wrapped(proc, pgid, group_pids)


def test_closing_stdin_stops_the_group(group_pids, poll_until):
    """The watchdog: what an SSH server does when the connection drops."""
    command = shell.remote_command(["sh", "-c", "sleep 300 & sleep 300 & wait"], grace=1.0)
    proc = subprocess.Popen(["bash", "-c", command], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE)
    pgid = None
    try:
        pgid = shell.parse_pgid_line(proc.stdout.readline().decode())
        assert pgid is not None
        assert poll_until(lambda: len(group_pids(pgid)) == 4)  # sh, 2 sleeps, watchdog
        proc.stdin.close()
        assert proc.wait(10) == 128 + signal.SIGTERM
        assert poll_until(lambda: not group_pids(pgid))
    finally:
        _kill_wrapped(proc, pgid, group_pids)


def test_quote_path_expands_only_a_leading_home():
    assert shell.quote_path("~") == '"$HOME"'
    assert shell.quote_path("~/a b") == '"$HOME"\'/a b\''
    assert shell.quote_path("/x/~/y") == "'/x/~/y'"
    assert shell.quote_path("~user") == "'~user'"
    code, out, _ = run_through("sh", "printf %s " + shell.quote_path("~/a $(b)"))
    assert (code, out) == (0, os.path.expanduser("~") + "/a $(b)")


@pytest.mark.parametrize("path", ["", "/", "//", ".", "..", "../x", "~", "a/.."])
def test_remove_tree_refuses_paths_never_meant(path):
    with pytest.raises(ValueError):
        shell.remove_tree_command(path)


def test_remove_and_makedirs_commands_handle_hostile_paths(tmp_path):
    target = tmp_path / "job $(x) 'q'\n`y`" / "sub dir"
    code, _, err = run_through("sh", shell.makedirs_command(str(target)))
    assert code == 0, err
    assert target.is_dir()
    code, _, err = run_through("sh", shell.remove_tree_command(str(target.parent)))
    assert code == 0, err
    assert os.listdir(tmp_path) == []

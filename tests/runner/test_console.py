"""The chief's console: TensorFlow's chatter and internal lines stay off it, the nodes' own lines pass."""
import io
import os
import subprocess
import sys
import textwrap

import pytest

from autodist.runner.base import OutputPump
from autodist.runner.console import NodeConsole, is_chatter

ABSL = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"
ONEDNN = ("I0000 00:00:1795547531.316711   10739 port.cc:153] oneDNN custom operations are on. You may see "
          "slightly different numerical results due to floating-point round-off errors.")
CPU_GUARD = ("I0000 00:00:1795547531.316711   10739 cpu_feature_guard.cc:210] This TensorFlow binary is "
             "optimized to use available CPU instructions in performance-critical operations.")
CPU_GUARD_2 = ("To enable the following instructions: AVX2 AVX512F FMA, in other operations, rebuild "
               "TensorFlow with the appropriate compiler flags.")
GRPC_INFO = "I1124 19:17:31.316711   10739 grpc_server_lib.cc:467] Started server with target: grpc://localhost:1"
RENDEZVOUS = ("W0000 00:00:1795547860.237434   13171 local_rendezvous.cc:412] Local rendezvous is aborting with "
              "status: ABORTED: Cleanup 10207506223286657 [type.googleapis.com/tensorflow.DerivedStatus='']")
WARNING = "W0000 00:00:1795547531.316711   10739 cpu_allocator_impl.cc:83] Allocation of 4096000 exceeds 10%"
ERROR = "E0000 00:00:1795547531.316711   10739 cuda_driver.cc:152] failed call to cuInit: UNKNOWN ERROR (303)"


@pytest.mark.parametrize("line", [ABSL, ONEDNN, CPU_GUARD, CPU_GUARD_2, GRPC_INFO, RENDEZVOUS],
                         ids=["absl", "onednn", "cpu-guard", "cpu-guard-2", "grpc-info", "rendezvous-cleanup"])
def test_tensorflow_start_up_chatter_is_chatter(line):
    assert is_chatter(line)


@pytest.mark.parametrize("line", [WARNING, ERROR, "WARNING:tensorflow:From train.py:3: deprecated",
                                  "step 41 loss 0.31", "I0000 is not a glog line", ""],
                         ids=["cpp-warning", "cpp-error", "python-warning", "user", "user-like-glog", "empty"])
def test_warnings_errors_and_the_users_lines_are_not(line):
    assert not is_chatter(line)


def _pump(console, tmp_path):
    pump = OutputPump("127.0.0.2", console, str(tmp_path / "node.log"))
    pump.feed("\n".join([ABSL, ONEDNN, "AUTODIST_SERVER_READY 4711", "step 1 loss 0.5", ERROR, ""]).encode())
    pump.close()
    return pump


def test_the_console_shows_the_nodes_own_lines_and_the_log_keeps_everything(tmp_path):
    stream = io.StringIO()
    pump = _pump(NodeConsole(stream, hidden=("AUTODIST_SERVER_READY",)), tmp_path)
    assert stream.getvalue() == "[127.0.0.2] step 1 loss 0.5\n[127.0.0.2] {}\n".format(ERROR)
    everything = [ABSL, ONEDNN, "AUTODIST_SERVER_READY 4711", "step 1 loss 0.5", ERROR]
    assert (tmp_path / "node.log").read_text().splitlines() == everything
    assert pump.tail(10).splitlines() == everything     # the coordinator's READY wait and error tails


def test_verbose_shows_every_line(tmp_path):
    stream = io.StringIO()
    _pump(NodeConsole(stream, verbose=True, hidden=("AUTODIST_SERVER_READY",)), tmp_path)
    assert len(stream.getvalue().splitlines()) == 5 and "AUTODIST_SERVER_READY 4711" in stream.getvalue()


def test_a_console_without_a_stream_writes_to_the_current_stdout(capsys):
    NodeConsole().write("[n] line\n")
    assert capsys.readouterr().out == "[n] line\n"


_IMPORTER = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[1])
    from autodist.runner.console import import_quietly
    module = import_quietly("noisy")
    print("imported", module.VALUE, flush=True)
    import os
    os.write(2, b"after the import\\n")
""")

_NOISY = textwrap.dedent('''
    import os, sys
    os.write(2, ({absl!r} + "\\n" + {onednn!r} + "\\n").encode())
    sys.stderr.write("a warning the user must see\\n")
    os.write(2, ({error!r} + "\\n").encode())
    VALUE = 42
''')


def test_import_quietly_drops_the_chatter_an_import_writes_to_fd_2_and_keeps_the_rest(tmp_path):
    (tmp_path / "noisy.py").write_text(_NOISY.format(absl=ABSL, onednn=ONEDNN, error=ERROR))
    done = subprocess.run([sys.executable, "-c", _IMPORTER, str(tmp_path)], capture_output=True, text=True,
                          timeout=60, env=dict(os.environ))
    assert done.returncode == 0, done.stderr
    assert done.stdout == "imported 42\n"
    assert done.stderr.splitlines() == ["a warning the user must see", ERROR, "after the import"]


@pytest.mark.slow
def test_quiet_tensorflow_start_leaves_stderr_clean():
    code = ("from autodist.runner.console import quiet_tensorflow_start; quiet_tensorflow_start(); "
            "import tensorflow as tf; tf.distribute.Server.create_local_server(); print('ok')")
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0 and done.stdout == "ok\n", done.stderr
    assert done.stderr == ""


def test_a_relayed_line_never_lands_inside_a_line_the_chief_is_printing(monkeypatch):
    """print() writes its text and its newline in two calls; the relay's line comes after the whole line."""
    import threading
    from autodist.runner.console import WholeLines
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    installed = WholeLines.install()
    assert sys.stdout is installed and WholeLines.install() is None   # installed once
    pump = OutputPump("127.0.0.2", NodeConsole())
    sys.stdout.write("loss=0.31")                                     # print's first write ...
    relay = threading.Thread(target=pump.feed, args=(b"loss=0.29\n",))
    relay.start()
    relay.join(5)
    assert out.getvalue() == "[127.0.0.2] loss=0.29\n"
    sys.stdout.write("\n")                                            # ... and its second
    sys.stdout.write("step 2")
    installed.uninstall()                                             # what is left is written, stdout is back
    assert out.getvalue() == "[127.0.0.2] loss=0.29\nloss=0.31\nstep 2" and sys.stdout is out


def test_a_flushed_partial_line_is_shown_at_once(monkeypatch):
    from autodist.runner.console import WholeLines
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    installed = WholeLines.install()
    try:
        print("epoch 1 ...", end="", flush=True)
        assert out.getvalue() == "epoch 1 ..." and sys.stdout.getvalue() == "epoch 1 ..."   # the stream's own API
    finally:
        installed.uninstall()


def test_relayed_lines_and_prints_under_the_live_progress_line_never_deadlock(monkeypatch):
    """The relay holds the sink lock and then rich's; a print under the live line holds rich's and then
    writes to the WholeLines below it: that must not take the sink lock (it deadlocked in review)."""
    import threading
    from autodist.runner.console import WholeLines
    from autodist.runtime.watch.progress import Progress

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    screen = Terminal()
    monkeypatch.setattr(sys, "stdout", screen)
    installed = WholeLines.install()
    progress = Progress(lambda: {}, "127.0.0.1", interval=0.001).start()
    pump = OutputPump("127.0.0.2", NodeConsole())
    counts = {"relayed": 0, "printed": 0}

    def relay():
        for _ in range(300):
            pump.feed(b"loss=0.29\n")
            counts["relayed"] += 1

    def prints():
        for step in range(300):
            print("step", step)
            counts["printed"] += 1

    threads = [threading.Thread(target=relay, daemon=True), threading.Thread(target=prints, daemon=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    if any(thread.is_alive() for thread in threads):   # deadlocked: leave the locks alone, give stdout back
        sys.stdout = screen
        pytest.fail("deadlock: {}".format(counts))
    progress.stop()
    installed.uninstall()
    assert counts == {"relayed": 300, "printed": 300}
    shown = screen.getvalue()
    assert shown.count("[127.0.0.2] loss=0.29") == 300 and "step 299" in shown

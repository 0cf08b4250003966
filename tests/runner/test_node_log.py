"""A launched process's log file: owner-only, and best-effort on a disk that fills up (issue 33, items 1, 12)."""
import io
import os
import stat
import sys

from autodist.runner.local import LocalRunner
from autodist.runner.node_log import NodeLog

PY = sys.executable
# 2 MB in lines of 100 characters, then a last line: far more than the 200 KiB the disk holds.
CHATTY = "import sys\nfor i in range(20000): print('x' * 99)\nprint('done')\nsys.exit(0)"


def test_a_full_log_disk_stops_the_logs_not_the_job(small_tmpfs):
    """The processes go on and exit 0, every line reaches the console, and the console says once why the logs
    stopped (before: ENOSPC in the relay thread closed the process's pipe, and its next print failed)."""
    out = io.StringIO()
    logs = small_tmpfs / "job-x"
    runner = LocalRunner("127.0.0.2", sink=out)
    handles = [runner.run([PY, "-c", CHATTY], log_path=str(logs / "127.0.0.2-{}.log".format(role)))
               for role in ("server", "worker")]
    assert [h.wait(120) for h in handles] == [0, 0]
    lines = out.getvalue().splitlines()
    notices = [line for line in lines if line.startswith("[autodist] ")]
    assert len(notices) == 1, notices
    assert notices[0].startswith("[autodist] node logs are no longer written: cannot write {}".format(logs))
    assert "No space left on device; the job goes on" in notices[0]
    assert lines.count("[127.0.0.2] done") == 2 and lines.count("[127.0.0.2] " + "x" * 99) == 40000
    assert [h.tail(1) for h in handles] == ["done", "done"]


def test_log_files_are_owner_only_also_under_a_loose_umask(tmp_path):
    previous = os.umask(0o022)
    try:
        fresh = NodeLog(str(tmp_path / "logs" / "new.log"), say=lambda text: None)
        fresh.write("a\n")
        fresh.close()
        loose = tmp_path / "old.log"
        loose.write_text("kept\n")
        os.chmod(str(loose), 0o644)
        again = NodeLog(str(loose), say=lambda text: None)
        again.write("b\n")
        again.close()
    finally:
        os.umask(previous)
    assert stat.S_IMODE(os.stat(str(tmp_path / "logs" / "new.log")).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(str(loose)).st_mode) == 0o600
    assert loose.read_text() == "kept\nb\n"


def test_a_log_that_cannot_be_created_is_said_once_per_directory(tmp_path):
    said = []
    (tmp_path / "file").write_text("not a directory")
    for name in ("a.log", "b.log"):
        log = NodeLog(str(tmp_path / "file" / name), say=said.append)
        log.write("lost\n")
        log.close()
        assert not log.writing
    assert len(said) == 1 and said[0].startswith("node logs are no longer written: cannot create ")

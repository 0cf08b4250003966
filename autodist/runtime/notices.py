"""The chief's own console lines about its job: ``[autodist] job <id>: ...``.

One function, so that where these lines go (a console, a progress display) is
decided in one place. The coordinator announces launches and stops with it;
stall reports and restarts (``autodist.runtime.watch.stall``,
``autodist.runtime.recovery.restart``) do too.
"""
from autodist.runner.base import write_line

__all__ = ["notice", "ANNOUNCE"]

ANNOUNCE = "autodist"  # the prefix of the chief's own output lines


def notice(sink, text):
    """Print ``text`` (may span lines) as the chief's own, to ``sink`` (None: stdout)."""
    for line in text.splitlines() or [""]:
        write_line(ANNOUNCE, sink, line)

"""Whether a process the test started is still running, by pid (a zombie is not: it has ended, unreaped)."""


def alive(pid):
    try:
        with open("/proc/{}/stat".format(pid)) as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False

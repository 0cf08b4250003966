"""A launched node's wait for every server of its job (``runtime.join.servers_up``), on loopback sockets."""
import socket
import threading

import pytest

from autodist.runtime.context import JobContext
from autodist.runtime.join.exchange import JoinError
from autodist.runtime.join.servers_up import await_servers


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _context(ports):
    servers = {"127.0.0.{}".format(i + 1): "127.0.0.1:{}".format(p) for i, p in enumerate(ports)}
    return JobContext(job_id="j", address="127.0.0.2", chief="127.0.0.1", servers=servers, strategy_path="s")


def test_it_returns_once_a_late_server_listens_and_says_whom_it_waited_for():
    ports = [_free_port() for _ in range(3)]
    listeners = []
    chief = socket.create_server(("127.0.0.1", ports[0]))
    listeners.append(chief)
    timer = threading.Timer(0.6, lambda: listeners.append(socket.create_server(("127.0.0.1", ports[2]))))
    timer.start()
    said = []
    try:
        waited = await_servers(_context(ports), timeout=20, say=said.append)
    finally:
        timer.join()
        for s in listeners:
            s.close()
    assert 0.5 < waited < 10
    assert said == []   # under REPORT_EVERY: nothing to say


def test_it_fails_at_its_bound_naming_the_node_that_never_listened():
    ports = [_free_port() for _ in range(3)]
    with socket.create_server(("127.0.0.1", ports[0])), socket.create_server(("127.0.0.1", ports[1])):
        with pytest.raises(JoinError) as e:
            await_servers(_context(ports), timeout=0.3, say=lambda text: None)
    assert "node 127.0.0.3 (127.0.0.1:{}): nothing listens there yet".format(ports[2]) in str(e.value)
    assert "127.0.0.1 (the chief)" not in str(e.value)

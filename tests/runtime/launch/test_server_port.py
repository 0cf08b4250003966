"""A node's server on a port that is taken: one line naming the port and who listens there (runtime.launch.server)."""
import socket
import subprocess
import sys
import textwrap

from autodist.runtime.launch.server import held_by

START = textwrap.dedent("""
    import sys
    from autodist.runner.console import quiet_tensorflow_start
    from autodist.runtime.launch.server import start_in_process
    quiet_tensorflow_start()
    start_in_process({"worker": ["127.0.0.1:" + sys.argv[1]]}, 0, 1, 0)
""")


def test_a_port_in_use_is_named_with_the_address_that_holds_it():
    # two jobs on the same ports: TensorFlow's raw "Could not start gRPC server" and a traceback before
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        assert held_by(port) == " (listening: 0.0.0.0:{})".format(port)
        done = subprocess.run([sys.executable, "-c", START, str(port)], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "LaunchError: cannot start this process's TensorFlow server 127.0.0.1:{0} (task 0 of the job): port {0} " \
           "is in use on this machine (listening: 0.0.0.0:{0})".format(port) in done.stderr, done.stderr
    assert "Could not start gRPC server" not in done.stderr and "Failed to add port" not in done.stderr
    assert held_by(port) == ""

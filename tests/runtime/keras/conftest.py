"""The Keras matrices' one-node pool: one in-process TensorFlow server for the whole session, every cell a job on it.

``AutoDist(spec, builder)`` on a one-node spec starts a TensorFlow server in
this process, and a server cannot be stopped: a matrix of a hundred cells
kept a hundred servers, their thread pools (about a hundred threads each) and
their memory until the session ended, and every cell ran slower than the one
before. ``pooled(builder, **kwargs)`` instead attaches an ``AutoDist`` to one
server of two CPU devices started on first use (``AutoDist(job=JobContext)``,
as the equivalence tier's node pools do), each cell a job of its own (job id,
strategy file, collective key window), whose resources are dropped when the
test ends. The path of ``AutoDist(spec, builder)`` itself (the chief starting
its own server) stays with the tests that are not matrices.
"""
import itertools
import uuid

import pytest

ADDRESS = "127.0.0.1"
_keys = itertools.count(1)


@pytest.fixture(scope="session")
def _one_node_server():
    """``{address: "host:port"}`` of this session's in-process server: the two CPU devices of ``spec``."""
    from autodist.runner import free_port
    from autodist.runtime.launch.server import start_in_process
    servers = {ADDRESS: "localhost:{}".format(free_port())}
    start_in_process({"worker": [servers[ADDRESS]]}, 0, 2, 0)
    return servers


@pytest.fixture
def pooled(spec, _one_node_server, tmp_path):
    """``pooled(builder, **autodist_kwargs) -> AutoDist``: a job of its own on the session's one-node server."""
    import tensorflow as tf
    from autodist import AutoDist
    from autodist.plan.names import KEY_WINDOW, job_container
    from autodist.runtime.context import JobContext
    jobs = []

    def make(builder, **kwargs):
        job_id = "kp-" + uuid.uuid4().hex[:12]
        jobs.append(job_id)
        context = JobContext(job_id=job_id, address=ADDRESS, servers=_one_node_server, chief=ADDRESS,
                             strategy_path=str(tmp_path / "{}.pb".format(job_id)),
                             collective_key_base=KEY_WINDOW * next(_keys))
        return AutoDist(spec, builder, job=context, **kwargs)
    yield make
    if jobs:
        tf.compat.v1.Session.reset("grpc://" + _one_node_server[ADDRESS], [job_container(j) for j in jobs])

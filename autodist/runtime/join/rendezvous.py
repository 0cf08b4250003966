"""MPI's start-up exchange: every rank learns every other rank's address from the chief.

``mpirun`` tells a rank only its rank and the job's size; the chief's address
comes in ``AUTODIST_CHIEF_ADDRESS``. Before any training server can start (its
cluster must list everyone), the chief serves a one-task TensorFlow server on
``AUTODIST_PORT + size`` and the others register with it through a session on
that server::

    rank k: enqueue "k host:port" ---> [register] on the chief <--- dequeue size-1 : chief
    rank k: dequeue <--------------- [cluster/k]  <---------------- enqueue the list : chief

Every wait is bounded by the job's ready timeout and names what it waits for.
"""
import dataclasses
import json

import tensorflow as tf

from autodist.runtime.join import peers
from autodist.runtime.join.exchange import JoinError
from autodist.runtime.join.places import advertised_host
from autodist.runner.base import run_bounded

__all__ = ["exchange_addresses"]

_JOB = "autodist_rendezvous"
_DEVICE = "/job:{}/task:0/device:CPU:0".format(_JOB)
_SERVERS = []   # the chief's start-up server: referenced until the process ends (it cannot be stopped)


def _queue(name):
    with tf.device(_DEVICE):
        return tf.queue.FIFOQueue(1 << 16, [tf.string], shapes=[[]], shared_name="rendezvous/" + name,
                                  name=name.replace("/", "_"))


def _run(target, build, timeout, what):
    graph = tf.Graph()
    with graph.as_default():
        fetch = build()
    box = []

    def call():
        try:
            with tf.compat.v1.Session(target, graph=graph) as session:
                box.append(session.run(fetch, options=tf.compat.v1.RunOptions(timeout_in_ms=int(timeout * 1000))))
        except tf.errors.OpError as e:
            box.append(e)
    if not run_bounded(call, timeout + 5.0, name="autodist-rendezvous") or not box \
            or isinstance(box[0], tf.errors.DeadlineExceededError):
        raise JoinError("{}: nothing came within {:.0f} s".format(what, timeout))
    if isinstance(box[0], tf.errors.OpError):
        raise JoinError("{}: {}".format(what, box[0].message.splitlines()[0]))
    return box[0]


def exchange_addresses(place, environ, timeout, say):
    """``place`` with every rank's "host:port" (rank k's server: the chief's base port + 1 + k... by the rule)."""
    base = int(place.chief_server.rpartition(":")[2]) - place.size
    own = "{}:{}".format(advertised_host(environ), base + place.rank)
    target = "grpc://" + place.chief_server
    if place.is_chief:
        _SERVERS.append(tf.distribute.Server({_JOB: [place.chief_server]}, job_name=_JOB, task_index=0))
        registered = _run(target, lambda: _queue("register").dequeue_many(place.size - 1), timeout,
                          "waited for the other {} ranks to register".format(place.size - 1)) if place.size > 1 else []
        servers = [None] * place.size
        servers[place.rank] = own
        for entry in registered:
            rank, server = entry.decode().split(" ", 1)
            servers[int(rank)] = server
        text = json.dumps(servers).encode()
        _run(target, lambda: tf.group(*[_queue("cluster/{}".format(r)).enqueue(text)
                                        for r in range(place.size) if r != place.rank]), timeout,
             "could not send the ranks their cluster")
    else:
        peers.await_peers({0: place.chief_server}, {0: "the chief's start-up exchange " + place.chief_server},
                          timeout, say)
        _run(target, lambda: _queue("register").enqueue("{} {}".format(place.rank, own)), timeout,
             "could not register with the chief at " + place.chief_server)
        servers = json.loads(_run(target, lambda: _queue("cluster/{}".format(place.rank)).dequeue(), timeout,
                                  "waited for the cluster from the chief at " + place.chief_server).decode())
    return dataclasses.replace(place, servers=tuple(servers), chief_server=servers[place.chief])

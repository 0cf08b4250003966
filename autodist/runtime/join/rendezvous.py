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
from autodist.runtime.join.exchange import run_ops
from autodist.runtime.join.places import advertised_host

__all__ = ["exchange_addresses"]

_JOB = "autodist_rendezvous"
_DEVICE = "/job:{}/task:0/device:CPU:0".format(_JOB)
_SERVERS = []   # the chief's start-up server: referenced until the process ends (it cannot be stopped)


def _queue(name):
    with tf.device(_DEVICE):
        return tf.queue.FIFOQueue(1 << 16, [tf.string], shapes=[[]], shared_name="rendezvous/" + name,
                                  name=name.replace("/", "_"))


def exchange_addresses(place, environ, timeout, say):
    """``place`` with every rank's "host:port" (rank k's server: the chief's base port + 1 + k... by the rule)."""
    base = int(place.chief_server.rpartition(":")[2]) - place.size
    own = "{}:{}".format(advertised_host(environ), base + place.rank)
    target = "grpc://" + place.chief_server
    if place.is_chief:
        _SERVERS.append(tf.distribute.Server({_JOB: [place.chief_server]}, job_name=_JOB, task_index=0))
        others = place.size - 1
        registered = run_ops(target, lambda: _queue("register").dequeue_many(others), timeout,
                             "waited for the other {} ranks to register".format(others)) if others else []
        servers = [None] * place.size
        servers[place.rank] = own
        for entry in registered:
            rank, server = entry.decode().split(" ", 1)
            servers[int(rank)] = server
        text = json.dumps(servers).encode()
        run_ops(target, lambda: tf.group(*[_queue("cluster/{}".format(r)).enqueue(text)
                                           for r in range(place.size) if r != place.rank]), timeout,
                "could not send the ranks their cluster")
    else:
        peers.await_peers({0: place.chief_server}, {0: "the chief's start-up exchange " + place.chief_server},
                          timeout, say)
        run_ops(target, lambda: _queue("register").enqueue("{} {}".format(place.rank, own)), timeout,
                "could not register with the chief at " + place.chief_server)
        servers = json.loads(run_ops(target, lambda: _queue("cluster/{}".format(place.rank)).dequeue(), timeout,
                                     "waited for the cluster from the chief at " + place.chief_server).decode())
    return dataclasses.replace(place, servers=tuple(servers), chief_server=servers[place.chief])

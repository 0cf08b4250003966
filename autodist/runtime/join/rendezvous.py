"""The start-up exchange: every process learns every other process's address from one of them.

``mpirun`` tells a rank only its rank and the job's size, and Slurm's
arbitrary distribution tells a task only its own node. Before any training
server can start (its cluster must list everyone), one process serves a
one-task TensorFlow server on ``AUTODIST_PORT + size`` at an address every
process knows (MPI: the chief's, ``AUTODIST_CHIEF_ADDRESS``; Slurm: the
step's first node) and the others register with it through a session on
that server::

    process k: enqueue "k host:port" ---> [register] on the server <--- dequeue size-1 : server
    process k: dequeue <--------------- [cluster/k]  <---------------- enqueue the list : server

A process's host is its place's (the chief's address, the Slurm node), else
the address of its interface that routes to the exchange's host
(``places.advertised_host``). Every wait is bounded by the job's ready
timeout and names what it waits for.
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


def exchange_addresses(place, timeout, say):
    """``place`` with every process's "host:port" (process k's server: the base port + k, by the rule)."""
    base = int(place.rendezvous.rpartition(":")[2]) - place.size
    target = "grpc://" + place.rendezvous
    if place.serves_rendezvous:
        _SERVERS.append(tf.distribute.Server({_JOB: [place.rendezvous]}, job_name=_JOB, task_index=0))
        others = place.size - 1
        registered = run_ops(target, lambda: _queue("register").dequeue_many(others), timeout,
                             "waited for the other {} processes to register".format(others)) if others else []
        servers = [None] * place.size
        servers[place.rank] = "{}:{}".format(advertised_host(place), base + place.rank)
        for entry in registered:
            rank, server = entry.decode().split(" ", 1)
            servers[int(rank)] = server
        text = json.dumps(servers).encode()
        run_ops(target, lambda: tf.group(*[_queue("cluster/{}".format(r)).enqueue(text)
                                           for r in range(place.size) if r != place.rank]), timeout,
                "could not send the processes their cluster")
    else:
        peers.await_peers({0: place.rendezvous}, {0: "the start-up exchange " + place.rendezvous}, timeout, say)
        own = "{}:{}".format(advertised_host(place), base + place.rank)   # its host answers: the route is known
        run_ops(target, lambda: _queue("register").enqueue("{} {}".format(place.rank, own)), timeout,
                "could not register with the start-up exchange at " + place.rendezvous)
        servers = json.loads(run_ops(target, lambda: _queue("cluster/{}".format(place.rank)).dequeue(), timeout,
                                     "waited for the cluster from the start-up exchange at " +
                                     place.rendezvous).decode())
    return dataclasses.replace(place, servers=tuple(servers), chief_server=servers[place.chief])

"""The resource spec of a platform-started job: built from its place, the same in every process.

A spec file (``AUTODIST_NODE_ADDRESS``) is the spec. Otherwise every process
builds it from the same facts: one node per task, named by its host, in rank
order, the chief's first; each node with the devices the process sees
(``places``). Its processes reach each other through TensorFlow only, so the
spec has no ``ssh`` groups. The chief hands its spec to the others, which
check that theirs is the same (a process that sees other devices stops,
saying so).
"""
from autodist.errors import ResourceSpecError
from autodist.spec.resource_spec import ResourceSpec

__all__ = ["job_spec", "nodes_by_rank", "host_of"]


def host_of(server):
    """``"host:port"`` / ``"[v6]:port"`` -> host."""
    return server.rpartition(":")[0].strip("[]")


def job_spec(place, spec=None):
    """The ResourceSpec of ``place``'s job (``spec``: the spec file's, which a spec-file place uses as it is)."""
    if place.source == "spec":
        return spec
    hosts = [host_of(s) for s in place.servers]
    if len(set(hosts)) != len(hosts):
        repeated = sorted({h for h in hosts if hosts.count(h) > 1})
        raise ResourceSpecError("several processes of the job run on {}: autodist runs one process per node, which "
                                "drives every device of the node (start one task per host: srun --ntasks-per-node=1, "
                                "one replica per pod)".format(", ".join(repeated)), key=place.source)
    nodes = []
    for rank, host in enumerate(hosts):
        node = {"address": host, "cpus": list(range(place.cpus)), "gpus": list(range(place.gpus))}
        if place.roles.get(rank) == "ps":
            node["gpus"] = []
        if rank == place.chief:
            node["chief"] = True
        nodes.append(node)
    return ResourceSpec.from_dict({"name": "{} job".format(place.source), "started_by": "platform", "nodes": nodes},
                                  path="<{}>".format(place.source))


def nodes_by_rank(spec, place):
    """The spec's node of each rank (a spec file's in its own order; a built spec's are in rank order)."""
    return list(spec.node_specs)

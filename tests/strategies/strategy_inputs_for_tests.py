"""Resource specs and builder variables of the strategy tests, by hand.

A module of its own (not ``conftest``): ``from conftest import ...`` finds
whichever test directory's conftest was imported first when several
directories are collected together.
"""
from autodist.spec.resource_spec import ResourceSpec
from autodist.strategies.inputs import BuilderVariable


def _spec_from(nodes):
    """A ResourceSpec of nodes given as (address, gpus, cpus); the first is the chief.

    Non-loopback nodes get an SSH group so the spec is valid; nothing connects.
    """
    data = {"nodes": [], "ssh": {"lab": {"username": "u"}}}
    for i, (address, gpus, cpus) in enumerate(nodes):
        node = {"address": address, "gpus": list(gpus), "cpus": list(cpus)}
        if i == 0:
            node["chief"] = True
        elif not ResourceSpec.is_loopback(address):
            node["ssh_config"] = "lab"
        data["nodes"].append(node)
    return ResourceSpec.from_dict(data, path="<test spec>")


def _var(name, shape, dtype="float32", itemsize=4, sparse=False, control_flow=False):
    """A BuilderVariable named ``name`` (op name) with the byte size of ``shape``."""
    elements = 1
    for d in shape or ():
        elements *= 1 if d is None else d
    return BuilderVariable(name=name + ":0", op_name=name, shape=None if shape is None else tuple(shape),
                        dtype=dtype, byte_size=elements * itemsize, is_sparse=sparse,
                        in_control_flow=control_flow)

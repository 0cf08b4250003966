"""The plan: the bottom layer that planning (``autodist.strategies``) and rewriting (``autodist.kernel``) share.

    contract   the Strategy protobuf as typed per-variable entries (``read_entries``, ``write_entry``)
    names      every name the rewritten graph uses: replicas, shards, proxies, init ops, devices,
               collective keys
    strategy   ``Strategy`` (the plan message: id, files, text) and ``assemble``, the one function
               that makes a new plan message

Nothing here imports TensorFlow, and nothing here imports another autodist
package but ``errors``, ``fileio`` and the generated ``proto``: builders
write plans through these modules, the kernel reads them through the same
ones, and neither imports the other. Modules are imported by path;
importing the package imports nothing.
"""
__all__ = []

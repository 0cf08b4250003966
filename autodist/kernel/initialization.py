"""The init ops of a node: identical initial values on every replica of every node.

Initialization is three session runs, in this order (``names.INIT_OPS``):

    servers  (chief only) parameter-server variables and the root replica's own
             copies run their initializers
    sync     the root replica broadcasts its values; every other replica of
             every node receives and assigns them (one collective per dtype)
    local    what the passes added (proxies filled from their servers, compressor
             state), lookup tables, staleness tokens

The root is the chief's first replica (``broadcast``), so mirrored copies
start identical, whatever their initializers. Variables whose initial value every process
computes identically (zeros, constants: most optimizer slots) need no
broadcast; every replica runs its own initializer in the sync step. The
broadcast is also the job's start barrier: it cannot finish before the chief
has initialized the servers' variables (a job with nothing to broadcast
broadcasts one scalar; a job of one replica has neither to do).

Why three runs: TensorFlow gives every process the same step id for a step
with collectives, and one process' end-of-step cleanup on a server aborts
whatever another process still runs there under that id. A step with
collectives therefore only touches this node's own devices; work on other
nodes' servers runs in steps without collectives.
"""
import collections

import tensorflow as tf
from tensorflow.python.ops import collective_ops

from autodist.errors import TransformError
from autodist.kernel import packing
from autodist.kernel.broadcast import chief_barrier, is_root, wire_dtype
from autodist.plan.names import INIT_KEY_OFFSET, INIT_LOCAL, INIT_SERVERS, INIT_SYNC
from autodist.kernel.synchronization import staleness

__all__ = ["build_init_ops"]


def _mirrored(assignment):
    """Mirrored variables to broadcast, by dtype (those not initialized identically everywhere)."""
    by_dtype = collections.defaultdict(list)
    for name in sorted(set(assignment.mirrored_vars) - assignment.analysis.deterministic):
        facts = assignment.analysis.variables[name]
        if not facts.shape.is_fully_defined():
            raise TransformError("has no fully defined shape; mirrored variables need one to be broadcast",
                                 pass_name="finalize", variable=name)
        if facts.dtype == tf.string:
            raise TransformError("is a string variable; only numeric variables can be mirrored",
                                 pass_name="finalize", variable=name)
        by_dtype[facts.dtype.name].append(facts)
    return [by_dtype[k] for k in sorted(by_dtype)]


class _Broadcast:
    """The initial broadcast of one dtype's mirrored variables (``broadcast``'s protocol), in three steps so
    that the per-variable ops are NodeDefs (``packing``) and only the collectives go through TensorFlow::

        __init__  root:      read every variable, pack                    (NodeDefs)
        build     root:      send the packed vector; receiver: receive   (the scratch graph)
        finish    receiver:  unpack, assign every variable                (NodeDefs, after the commit)
    """

    def __init__(self, editor, assignment, group, key, replicas):
        self.assignment, self.group, self.key, self.replicas = assignment, group, key, replicas
        self.dtype, self.shapes = group[0].dtype, [f.shape for f in group]
        self.flat, self.received, self.made = {}, {}, []
        for replica in replicas:
            if is_root(assignment, replica):
                reads, made = packing.read_variables(editor, self._handles(replica), self.dtype,
                                                     self._scope(replica), replica.device)
                self.flat[replica.prefix], packed = packing.pack(editor, reads, self.dtype, self.shapes,
                                                                 self._scope(replica), replica.device)
                self.made += made + packed

    def _scope(self, replica):
        return "AutoDist-Init/{}{}/".format(replica.prefix, self.dtype.name)

    def _handles(self, replica):
        return [replica.prefix + f.name for f in self.group]

    def build(self, scratch):
        """The send (root) and the receives; returns the sends' ops."""
        sends = []
        group = dict(group_size=self.assignment.num_replicas, group_key=self.assignment.group_key,
                     instance_key=self.key)
        wire = wire_dtype(self.dtype)
        for replica in self.replicas:
            with tf.device(replica.device), tf.name_scope(self._scope(replica)):
                if replica.prefix in self.flat:
                    flat = tf.cast(scratch.tensor(self.flat[replica.prefix]), wire)
                    sends.append(collective_ops.broadcast_send_v2(flat, **group).op)
                    continue
                total = sum(shape.num_elements() for shape in self.shapes)
                received = collective_ops.broadcast_recv_v2(tf.constant([total]), wire, **group)
                self.received[replica.prefix] = tf.cast(received, self.dtype).name
        return sends

    def finish(self, editor):
        """The receivers' assignments (their names); ``made`` then lists every NodeDef this broadcast added."""
        assigns = []
        for replica in self.replicas:
            if replica.prefix not in self.received:
                continue
            scope, device = self._scope(replica), replica.device
            pieces, made = packing.unpack(editor, self.received[replica.prefix], self.dtype, self.shapes, scope,
                                          device)
            names = packing.assign_variables(editor, self._handles(replica), pieces, self.dtype, scope, device)
            self.made += made + names
            assigns += names
        return assigns


def _initializers(assignment, item):
    """(servers, own, local): the existing initializers each init op runs (see the module docstring)."""
    facts = assignment.analysis.variables
    servers = []
    if assignment.node.is_chief:
        root = assignment.chief_replica
        servers = sorted({facts[v].initializer for v in assignment.ps_state})
        servers += [root.prefix + facts[v].initializer for v in sorted(assignment.mirrored_vars)]
    deterministic = sorted(set(assignment.mirrored_vars) & assignment.analysis.deterministic)
    own = [r.prefix + facts[v].initializer for r in assignment.local for v in deterministic
           if not (assignment.node.is_chief and is_root(assignment, r))]
    tables = _original_tables(item, assignment)
    local = _added_initializers(assignment, item) + [r.prefix + t for r in assignment.local for t in tables]
    return servers, own, local


def build_init_ops(editor, assignment, item):
    """Add this node's three init ops (``INIT_OPS``) to the editor's graph.

    Existing initializers join the init ops as control inputs added to the
    GraphDef after the splice (cheaper than a stand-in op per initializer).
    """
    servers, own, local = _initializers(assignment, item)
    # The root sends; the receiving replicas are alike: build one, clone the others.
    roots = [r for r in assignment.local if is_root(assignment, r)]
    receivers = [r for r in assignment.local if not is_root(assignment, r)]
    built_for = roots + receivers[:1]
    key = assignment.key_base + INIT_KEY_OFFSET
    groups = _mirrored(assignment) if assignment.num_replicas > 1 else []   # one replica: nothing to copy
    broadcasts = [_Broadcast(editor, assignment, group, key + i, built_for) for i, group in enumerate(groups)]
    scratch = editor.scratch()
    with scratch.graph.as_default():
        tf.no_op(name=INIT_SERVERS)
        if broadcasts:
            synced = [op for broadcast in broadcasts for op in broadcast.build(scratch)]
        elif assignment.num_replicas > 1:   # nothing to broadcast: the start barrier alone
            synced = chief_barrier(assignment, key, built_for,
                                   scope=lambda r: "AutoDist-Init/{}barrier/".format(r.prefix))
        else:
            synced = []  # one replica in the whole job: no one to wait for
        tf.group(*synced, name=INIT_SYNC)
        fill = staleness.prefill(scratch, assignment)
        tf.group(*([fill] if fill is not None else []), name=INIT_LOCAL)
    built = scratch.commit()
    assigns = [name for broadcast in broadcasts for name in broadcast.finish(editor)]
    editor.add_control_inputs(INIT_SYNC, assigns)
    synced = [op.name for op in synced] + assigns
    built += [name for broadcast in broadcasts for name in broadcast.made]
    if len(receivers) > 1:
        template = receivers[0]
        editor.clone_for_replicas([n for n in built if template.prefix in n], template, receivers[1:])
        own += [name.replace(template.prefix, r.prefix) for r in receivers[1:] for name in synced
                if template.prefix in name]
    editor.add_control_inputs(INIT_SERVERS, servers)
    editor.add_control_inputs(INIT_SYNC, own)
    editor.add_control_inputs(INIT_LOCAL, local)


def _added_initializers(assignment, item):
    """Initializers of variables the passes created (not in the single-device graph)."""
    known = set()
    for facts in assignment.analysis.variables.values():
        known.add(facts.initializer)
        known.update(r.prefix + facts.initializer for r in assignment.local)
    return [v.initializer_name for v in item.info.variables if v.initializer_name not in known]


def _original_tables(item, assignment):
    prefixes = tuple(r.prefix for r in assignment.local)
    names = set()
    for name in item.info.table_initializers:
        for prefix in prefixes:
            if name.startswith(prefix):
                names.add(name[len(prefix):])
    return sorted(names)

"""What every process of a job must agree on: a fingerprint of its GraphItem, and the first difference of two.

Every process of a job runs the same script and captures its own graph; the
chief plans, and each process rewrites its own graph by the chief's plan. A
process whose script took another path (another learning rate from its
arguments, another layer size, another optimizer) would train another model
without a word, or fail in TensorFlow far from the cause. So the chief ships
its fingerprint with its plan, and every other process compares its own::

    chief                                        every other process
    fingerprint(item) -> the plan's hand-off      fingerprint(item), then first_difference(chief's, own)
                                                  -> GraphMismatchError naming the first difference:
                                                     the optimizer or a hyper-parameter, a variable
                                                     (missing, another shape or dtype), an op (missing,
                                                     or its type, inputs or attributes), a function

A fingerprint holds a digest of everything, and what names a difference: the
optimizer and its hyper-parameters and every variable in full, every op's name
and a 4-byte digest of it, in the order the script made them, compressed
(``benchmarks/fingerprint.py`` measures its time and size on 10,000 variables).

Left out, as they may differ between the processes of one job by design:
the input pipeline (datasets, iterators and what only they use: each node may
read its own files), the variables' initializers and what only they use (every
node starts from the chief's values, broadcast), seeds, devices, resource names (``shared_name``,
``container``: a lookup table's holds a random UUID), the values of string
constants and of constants of more than ``SMALL_CONSTANT`` elements (file
names, log directories, data; their dtype and shape count), and the numbers
TensorFlow appends to the names of the functions it traces (and to the names
of their arguments, ops and results, which may carry them) and of the gradients
``tf.custom_gradient`` registers (``_gradient_op_type``).
"""
import base64
import hashlib
import inspect
import json
import re
import zlib

import tensorflow as tf
from tensorflow.python.framework import op_def_registry

from autodist.errors import GraphMismatchError
from autodist.graph_editor.util import library_closure

__all__ = ["fingerprint", "first_difference", "check_same_graph", "SMALL_CONSTANT"]

SMALL_CONSTANT = 64   # elements: a hyper-parameter or a small table is compared by value, data only by dtype and shape
_DROPPED_ATTRS = ("seed", "seed2", "shared_name", "container")
_VARIABLE_OPS = ("VarHandleOp", "VariableV2", "Variable")
_STRING = tf.string.as_datatype_enum
_OP_DIGEST = 4   # bytes an op: enough to find the op that differs (the whole graph's digest is SHA-256)
_KINDS = {}      # op type -> ``_op_kind``: the registry's definitions do not change in a process
_UID = re.compile(r"_\d+(?=_|\Z)")   # "__inference___backward_f_18_37", "while_body_8_rewritten": the counters
#: in a function: "while_cond_112___redundant_placeholder0", "Op_1:y:0", "Mul_1/TensorListPopBack" (while_v2's
#: gradient makes its accumulators in an order that may differ between processes: only their numbers differ)
_LOCAL_UID = re.compile(r"_\d+(?=[_:/]|\Z)")
_GRADIENT_TYPE = "_gradient_op_type"   # "CustomGradient-1234": tf.custom_gradient's registration, by a process counter


def fingerprint(item):
    """The fingerprint of ``item`` (a GraphItem) as JSON-able data (see the module docstring)."""
    graph_def = item.graph.as_graph_def()   # a copy: normalized in place
    left_out = _left_out(item.graph, graph_def, {v.initializer_name.split(":")[0] for v in item.info.variables})
    names, digests, variables, callers = [], [], {}, []
    for node in graph_def.node:
        if node.name in left_out:
            continue
        if _op_kind(node.op)[1]:   # it calls functions: by the names they have before _normalize drops numbers
            callers.append(type(node).FromString(node.SerializeToString()))
        _normalize(node)
        if node.op in _VARIABLE_OPS:
            variables[node.name] = node
        names.append(node.name)
        digests.append(hashlib.blake2b(node.SerializeToString(deterministic=True), digest_size=_OP_DIGEST).digest())
    used = {f.signature.name for f in library_closure(callers, graph_def.library).function}
    functions = sorted((_UID.sub("", f.signature.name), _digest(_normal_function(f, used)))
                       for f in graph_def.library.function if f.signature.name in used)
    data = {"optimizer": _optimizer(item), "variables": _variables(item, variables),
            "op_names": _pack("\n".join(names).encode()), "op_digests": _pack(b"".join(digests)),
            "functions": _pack("\n".join("{}\t{}".format(n, d) for n, d in functions).encode())}
    data["digest"] = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()
    return data


def check_same_graph(chiefs, mine, me, chief):
    """Raise ``GraphMismatchError`` when ``mine`` (this process's fingerprint) differs from the chief's."""
    difference = first_difference(chiefs, mine)
    if difference is not None:
        raise GraphMismatchError("{} captured another graph than the chief {}: {}. Every process of a job must build "
                                 "the same model (the same script, arguments and optimizer); what each reads (its "
                                 "data, files, seeds) may differ".format(me, chief, difference))


def first_difference(chiefs, mine):
    """None when the fingerprints agree, else the first difference in words (optimizer, variables, ops, functions)."""
    if chiefs["digest"] == mine["digest"]:
        return None
    return (_optimizer_difference(chiefs["optimizer"], mine["optimizer"]) or
            _named_difference("variable", _unpack(chiefs["variables"]), _unpack(mine["variables"])) or
            _first_op_difference(_ops(chiefs), _ops(mine)) or
            _named_difference("function", _unpack(chiefs["functions"], multi=True),
                              _unpack(mine["functions"], multi=True), "its body") or
            "the graphs differ (not located)")


# -- what is compared ------------------------------------------------------------------------------

def _left_out(graph, graph_def, initializers):
    """Names of the ops each process may have of its own: the input pipeline (dataset and iterator ops), the
    variables' ``initializers`` (every process starts from the chief's values, broadcast), and every op that
    only those use (their files, sizes, shard index; an unseeded model's initial values). Only the roots'
    ancestors can be such ops: they are walked in ``graph``, consumers before producers."""
    roots = set(initializers) | {n.name for n in graph_def.node if "Dataset" in n.op or "Iterator" in n.op}
    found = [op for op in (_find(graph, name) for name in sorted(roots)) if op is not None]
    left = set()
    for op in reversed(_ancestors(found)):
        users = [c for t in op.outputs for c in t.consumers()] + list(op._control_outputs)
        if op.name in roots or (users and all(u.name in left for u in users)):
            left.add(op.name)
    return left


def _find(graph, name):
    try:
        return graph.get_operation_by_name(name)
    except KeyError:   # an initializer the item records by a name its graph no longer has
        return None


def _ancestors(ops):
    """``ops`` and every op they depend on, producers before their consumers (a depth-first post-order)."""
    order, seen, stack = [], set(), [(op, False) for op in ops]
    while stack:
        op, done = stack.pop()
        if done:
            order.append(op)
        elif op.name not in seen:
            seen.add(op.name)
            stack.append((op, True))
            stack += [(i, False) for i in [t.op for t in op.inputs] + list(op.control_inputs) if i.name not in seen]
    return order


def _op_kind(op_type):
    """``(attributes to drop, whether it calls functions)`` of an op type, from its registered definition (an op
    the registry does not know is a call of a library function)."""
    if op_type not in _KINDS:
        definition = op_def_registry.get(op_type)
        if definition is None:
            _KINDS[op_type] = ((), True)
        else:
            attrs = {a.name: a.type for a in definition.attr}
            _KINDS[op_type] = (tuple(a for a in _DROPPED_ATTRS if a in attrs),
                               any(t in ("func", "list(func)") for t in attrs.values()))
    return _KINDS[op_type]


def _normalize(node):
    """Drop from ``node`` (in place) what may differ between processes."""
    dropped, calls = _op_kind(node.op)
    if node.device:
        node.ClearField("device")
    for key in dropped:
        if key in node.attr:
            del node.attr[key]
    if node.op == "Const":
        tensor = node.attr["value"].tensor
        if tensor.dtype == _STRING or _elements(tensor) > SMALL_CONSTANT:
            tensor.CopyFrom(type(tensor)(dtype=tensor.dtype, tensor_shape=tensor.tensor_shape))
    if _GRADIENT_TYPE in node.attr:
        node.attr[_GRADIENT_TYPE].s = re.sub(rb"-\d+\Z", b"", node.attr[_GRADIENT_TYPE].s)
    if not calls:
        return
    if op_def_registry.get(node.op) is None:   # a library function called as an op
        node.op = _UID.sub("", node.op)
    for value in node.attr.values():
        _normal_funcs(value)


def _elements(tensor):
    size = 1
    for dim in tensor.tensor_shape.dim:
        size *= max(dim.size, 0)
    return size


def _normal_funcs(value):
    if value.HasField("func"):
        value.func.name = _UID.sub("", value.func.name)
    for func in value.list.func:
        func.name = _UID.sub("", func.name)


def _normal_function(function, names):
    """The function's bytes with the numbers dropped from its name and the names of ``names`` it refers to."""
    function = type(function).FromString(function.SerializeToString())
    function.signature.name = _UID.sub("", function.signature.name)
    for arg in list(function.signature.input_arg) + list(function.signature.output_arg):
        arg.name = _LOCAL_UID.sub("", arg.name)   # "lstm_while_cond_112___redundant_placeholder0": a counter
    for returns in (function.ret, function.control_ret):   # as a set too: while_v2's gradient pairs its results
        values = sorted(_LOCAL_UID.sub("", value) for value in returns.values())   # with ops in varying order
        returns.clear()
        returns.update({str(i): value for i, value in enumerate(values)})
    for value in function.attr.values():   # forward_function_name, backward_function_name
        if value.HasField("s") and value.s.decode("utf-8", "replace") in names:
            value.s = _UID.sub("", value.s.decode()).encode()
    for node in function.node_def:
        _normalize(node)
        node.name = _LOCAL_UID.sub("", node.name)
        node.input[:] = [_LOCAL_UID.sub("", name) for name in node.input]
    nodes = sorted(function.node_def, key=lambda node: node.SerializeToString(deterministic=True))
    del function.node_def[:]
    function.node_def.extend(nodes)   # as a set: only numbers tell apart nodes made in another order
    return function.SerializeToString(deterministic=True)


def _variables(item, nodes):
    """``{variable op name: "float32[3,1]" (+ " trainable")}`` of the item's variables (``nodes``: their ops)."""
    lines = []
    for var_def in item.info.variables:
        node = nodes.get(var_def.variable_name.split(":")[0])
        if node is None:
            continue
        dtype = tf.as_dtype(node.attr["dtype"].type).name if "dtype" in node.attr else "?"
        shape = tf.TensorShape(node.attr["shape"].shape) if "shape" in node.attr else tf.TensorShape(None)
        lines.append("{}\t{}{}{}".format(node.name, dtype, shape.as_list() if shape.rank is not None else "[?]",
                                        " trainable" if var_def.trainable else ""))
    return _pack("\n".join(lines).encode())


def _optimizer(item):
    """``[class name, {hyper-parameter: value in words}]`` of the recorded optimizer, or None."""
    if item.optimizer is None:
        return None
    try:
        bound = inspect.signature(item.optimizer.__init__).bind_partial(None, *item.optimizer_args,
                                                                          **item.optimizer_kwargs).arguments
        bound.pop(next(iter(bound)))   # self
        params = dict(bound)
    except (TypeError, ValueError):
        params = dict({str(i): a for i, a in enumerate(item.optimizer_args)}, **item.optimizer_kwargs)
    return [item.optimizer.__name__, {str(k): _words(v) for k, v in params.items()}]


def _words(value, depth=0):
    """A value as words that are equal exactly when the values are (no object addresses)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return repr(value)
    if depth > 4:
        return type(value).__name__
    if isinstance(value, (list, tuple)):
        return "[{}]".format(", ".join(_words(v, depth + 1) for v in value))
    if isinstance(value, dict):
        return "{{{}}}".format(", ".join("{}: {}".format(k, _words(v, depth + 1)) for k, v in sorted(
            value.items(), key=lambda kv: str(kv[0]))))
    if isinstance(value, (tf.Tensor, tf.Variable)) or hasattr(value, "op"):
        return "tensor {}".format(getattr(value, "name", "?"))
    if hasattr(value, "get_config"):
        try:
            return "{}({})".format(type(value).__name__, _words(value.get_config(), depth + 1))
        except (TypeError, ValueError, NotImplementedError, AttributeError):
            pass
    if hasattr(value, "item") and hasattr(value, "dtype"):   # a numpy scalar
        return repr(value.item())
    return type(value).__name__


# -- differences in words --------------------------------------------------------------------------

def _optimizer_difference(chiefs, mine):
    if chiefs == mine:
        return None
    if chiefs is None or mine is None or chiefs[0] != mine[0]:
        return "the optimizer is {} on the chief and {} here".format(chiefs[0] if chiefs else "none",
                                                                     mine[0] if mine else "none")
    for key in list(chiefs[1]) + [k for k in mine[1] if k not in chiefs[1]]:
        theirs, ours = chiefs[1].get(key, "not given"), mine[1].get(key, "not given")
        if theirs != ours:
            return "the optimizer {}'s {}: {} on the chief, {} here".format(chiefs[0], key, theirs, ours)
    return None


def _named_difference(what, chiefs, mine, detail=None):
    """The first entry (in the chief's order) that is missing here or differs, else the first one only here."""
    for name, value in chiefs.items():
        if name not in mine:
            return "{} {!r} of the chief is not in this process's graph".format(what, name)
        if mine[name] != value:
            if detail is None:   # the values are words: show both
                return "{} {!r} is {} on the chief, {} here".format(what, name, value, mine[name])
            return "{} {!r} differs from the chief's ({})".format(what, name, detail)
    extra = next((name for name in mine if name not in chiefs), None)
    return None if extra is None else "{} {!r} is in this process's graph, not in the chief's".format(what, extra)


def _first_op_difference(chiefs, mine):
    """The first place, in the order the script made its ops, where this process's ops part from the chief's."""
    theirs, ours = list(chiefs.items()), list(mine.items())
    for (name, digest), (own, own_digest) in zip(theirs, ours):
        if name == own and digest != own_digest:
            return "op {!r} differs from the chief's (its type, inputs or attributes)".format(name)
        if name != own:
            if own not in chiefs:
                return "op {!r} is in this process's graph, not in the chief's".format(own)
            if name not in mine:
                return "op {!r} of the chief is not in this process's graph".format(name)
            return "the ops are made in another order: {!r} where the chief made {!r}".format(own, name)
    if len(theirs) != len(ours):
        longer, whose = (theirs, "the chief's graph ends with") if len(theirs) > len(ours) else (
            ours, "this process's graph ends with")
        return "{} op {!r}, which the other lacks".format(whose, longer[min(len(theirs), len(ours))][0])
    return None


def _digest(data):
    return hashlib.blake2b(data, digest_size=8).hexdigest()


def _pack(data):
    return base64.b64encode(zlib.compress(data, 6)).decode("ascii")


def _raw(packed):
    return zlib.decompress(base64.b64decode(packed))


def _ops(fingerprinted):
    """``{op name: its digest}``, in the order the script made the ops."""
    names = _raw(fingerprinted["op_names"]).decode().split("\n")
    digests = _raw(fingerprinted["op_digests"])
    return {name: digests[i * _OP_DIGEST:(i + 1) * _OP_DIGEST] for i, name in enumerate(names)}


def _unpack(packed, multi=False):
    """``{name: value}`` of packed ``name<TAB>value`` lines (``multi``: {name: sorted values}, names may repeat)."""
    found = {}
    for line in filter(None, _raw(packed).decode().split("\n")):
        name, _, value = line.partition("\t")
        if multi:
            found.setdefault(name, []).append(value)
        else:
            found[name] = value
    return {k: sorted(v) for k, v in found.items()} if multi else found

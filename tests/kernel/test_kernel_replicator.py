"""The replicate pass: one copy per local replica, shared ops kept once, devices, colocation, records."""
import pytest
import tensorflow as tf
from tensorflow.core.framework import node_def_pb2

from autodist.kernel.analysis import analyze
from autodist.kernel.device import has_kernel, replica_device
from autodist.kernel.assignment import NodeContext, Replica, assign
from autodist.plan.contract import read_entries
from autodist.kernel.replicator import Replicator, replicated_name
from kernel_harness import capture, device, make_strategy, nodes_by_name, tf1

PS_DEVICE = device(0, 0)
GPU0, GPU1 = device(0, 0, "GPU"), device(0, 1, "GPU")


def _build():
    x = tf1.placeholder(tf.float32, [None, 2], name="x")
    w = tf1.get_variable("w", initializer=tf.ones([2, 1]))
    b = tf1.get_variable("b", initializer=tf.zeros([1]))
    out = tf.matmul(x, w, name="out") + b
    loss = tf.reduce_mean(out, name="loss")
    tf.identity(loss, name="loss_copy")
    tf.strings.as_string(loss, name="loss_text")                 # no GPU kernel anywhere
    with tf.device("/device:CPU:0"):
        tf.identity(loss, name="pinned")                           # the user asked for a CPU
    with tf1.colocate_with(w):
        tf.identity(loss, name="near_w")                           # colocated with a shared op
    with tf1.colocate_with(b):
        tf.identity(loss, name="near_b")                           # colocated with a copied op
    queue = tf.queue.FIFOQueue(4, [tf.float32], shared_name="user_queue", name="user_queue")
    queue.enqueue(loss, name="user_enqueue")
    train = tf1.train.GradientDescentOptimizer(0.1).minimize(loss)
    return {"train": train}


def _replicate(replicas, task=0, num_tasks=1):
    item, _ = capture(_build)
    strategy = make_strategy(replicas, ps={"w": dict(device=PS_DEVICE)}, ar={"b": {}})
    assignment = assign(analyze(item), read_entries(strategy), NodeContext("rep-test", task, num_tasks))
    before = item.graph_def.SerializeToString(deterministic=True)
    out = Replicator(assignment)(item).item
    assert item.graph_def.SerializeToString(deterministic=True) == before   # input never mutated
    return item, assignment, out


@pytest.fixture(scope="module")
def cpu_replicas():
    return _replicate([device(0, 0), device(0, 1)])


def test_one_copy_per_local_replica_and_shared_ops_once(cpu_replicas):
    item, assignment, out = cpu_replicas
    nodes = nodes_by_name(out.graph_def)
    for node in item.graph_def.node:
        if assignment.is_shared(node.name):
            assert node.name in nodes and nodes[node.name].device == PS_DEVICE
            assert not any(n.endswith("/" + node.name) for n in nodes if n.startswith("AutoDist-Replica-"))
        else:
            assert node.name not in nodes
            for i in range(2):
                assert "AutoDist-Replica-{}/{}".format(i, node.name) in nodes
    assert len(nodes) == 2 * len(item.graph_def.node) - len([n for n in item.graph_def.node
                                                              if assignment.is_shared(n.name)])
    assert {"w", "w/Assign"} <= {n for n in nodes if not n.startswith("AutoDist-Replica-")}


def test_inputs_name_the_same_replicas_copies_or_the_shared_op(cpu_replicas):
    _, _, out = cpu_replicas
    nodes = nodes_by_name(out.graph_def)
    for i in range(2):
        prefix = "AutoDist-Replica-{}/".format(i)
        matmul = nodes[prefix + "out"]
        assert matmul.input[0] == prefix + "x"
        read = nodes[matmul.input[1].split(":")[0]]
        assert read.name.startswith(prefix) and list(read.input) == ["w"]      # the one server copy
        for node in nodes.values():
            if node.name.startswith(prefix):
                for entry in node.input:
                    op = entry.lstrip("^").split(":")[0]
                    assert op.startswith(prefix) or not op.startswith("AutoDist-Replica-")


def test_devices_on_cpu_replicas(cpu_replicas):
    _, _, out = cpu_replicas
    nodes = nodes_by_name(out.graph_def)
    for i in range(2):
        prefix = "AutoDist-Replica-{}/".format(i)
        assert nodes[prefix + "out"].device == device(0, i)
        assert nodes[prefix + "b"].device == device(0, i)
        # an op reading the parameter-server variable sits with it
        assert nodes[nodes[prefix + "out"].input[1].split(":")[0]].device == PS_DEVICE
        assert nodes[prefix + "pinned"].device == device(0, 0)


def test_gpu_replicas_keep_cpu_only_ops_on_the_host():
    """Structure only: fake GPU replica names, nothing runs."""
    item, _, out = _replicate([GPU0, GPU1])
    nodes = nodes_by_name(out.graph_def)
    host = device(0, 0)
    for i, gpu in enumerate((GPU0, GPU1)):
        prefix = "AutoDist-Replica-{}/".format(i)
        assert nodes[prefix + "loss_copy"].device == gpu          # Identity has a GPU kernel
        assert nodes[prefix + "loss_text"].device == host         # AsString has CPU kernels only
        assert nodes[prefix + "pinned"].device == host            # pinned by the user
        assert nodes[prefix + "x"].device == (gpu if has_kernel("Placeholder", "GPU") else host)
        for node in item.graph_def.node:
            copy = nodes.get(prefix + node.name)
            if copy is None or copy.device == PS_DEVICE:
                continue
            wanted = gpu if has_kernel(node.op, "GPU") and not node.device else host
            assert copy.device == wanted, node.name


def test_replica_device_rules():
    gpu = Replica(local_index=0, global_index=0, device=GPU1, host_cpu=device(0, 0))
    identity = node_def_pb2.NodeDef(name="i", op="Identity")
    assert replica_device(identity, gpu) == GPU1
    assert replica_device(identity, gpu, resource_device=device(3, 0)) == device(3, 0)
    assert replica_device(node_def_pb2.NodeDef(name="s", op="StringJoin"), gpu) == device(0, 0)
    pinned = node_def_pb2.NodeDef(name="p", op="Identity", device="/cpu:0")
    assert replica_device(pinned, gpu) == device(0, 0)


def test_colocation_only_among_one_replicas_copies(cpu_replicas):
    _, _, out = cpu_replicas
    nodes = nodes_by_name(out.graph_def)
    for i in range(2):
        prefix = "AutoDist-Replica-{}/".format(i)
        assert "_class" not in nodes[prefix + "near_w"].attr
        assert list(nodes[prefix + "near_b"].attr["_class"].list.s) == [("loc:@" + prefix + "b").encode()]


def test_shared_names_are_made_per_replica(cpu_replicas):
    _, _, out = cpu_replicas
    nodes = nodes_by_name(out.graph_def)
    names = {nodes["AutoDist-Replica-{}/user_queue".format(i)].attr["shared_name"].s for i in range(2)}
    assert names == {b"AutoDist-Replica-0/user_queue", b"AutoDist-Replica-1/user_queue"}


def test_records_info_and_train_ops(cpu_replicas):
    item, _, out = cpu_replicas
    assert out.train_op_names == ["AutoDist-Replica-{}/{}".format(i, name)
                                  for i in range(2) for name in item.train_op_names]
    variables = sorted(v.variable_name for v in out.info.variables)
    assert variables == ["AutoDist-Replica-0/b:0", "AutoDist-Replica-1/b:0", "w:0"]
    records = {r.target: r for r in out.grad_records}
    assert set(records) == {"w:0", "AutoDist-Replica-0/b:0"}
    assert records["w:0"].grad.startswith("AutoDist-Replica-0/gradients/")
    assert out.optimizer is item.optimizer


def test_a_second_node_places_its_copies_on_its_own_task():
    _, assignment, out = _replicate([device(0, 0), device(1, 0), device(1, 1)], task=1, num_tasks=2)
    nodes = nodes_by_name(out.graph_def)
    assert [r.device for r in assignment.local] == [device(1, 0), device(1, 1)]
    assert nodes["AutoDist-Replica-1/out"].device == device(1, 1)
    assert nodes["AutoDist-Replica-0/pinned"].device == device(1, 0)
    assert nodes["w"].device == PS_DEVICE
    assert not any(n.startswith("AutoDist-Replica-2/") for n in nodes)


def test_replicated_name():
    shared = {"w"}
    assert replicated_name("x:1", "P/", shared) == "P/x:1"
    assert replicated_name("^x", "P/", shared) == "^P/x"
    assert replicated_name("w:0", "P/", shared) == "w:0" and replicated_name("^w", "P/", shared) == "^w"


SERVER = device(1, 0)


def _build_sparse_updates():
    ids = tf1.placeholder(tf.int64, [None], name="ids")
    table = tf1.get_variable("table", initializer=tf.ones([8, 2]))
    v = tf1.get_variable("v", initializer=tf.ones([2, 1]))
    b = tf1.get_variable("b", initializer=tf.zeros([1]))
    loss = tf.reduce_mean(tf.matmul(tf.nn.embedding_lookup(table, ids), v) + b, name="loss")
    opt = tf1.train.GradientDescentOptimizer(0.1)
    grads, variables = zip(*opt.compute_gradients(loss))
    clipped, _ = tf.clip_by_global_norm(grads, 1.0, name="clip")
    return {"train": opt.apply_gradients(zip(clipped, variables))}


def test_a_ps_variables_update_runs_on_its_server():
    """SGD's sparse update is ``ScatterAdd(table, -lr * grad)``: the arithmetic sits with the table on
    its server (the synchronized gradient is there), not on the chief's replica, which would carry
    the gradient to the chief's node and back. What every variable's update shares (the global-norm
    clip) and an all-reduced variable's update stay on the replica."""
    item, _ = capture(_build_sparse_updates)
    strategy = make_strategy([device(0, 0), device(1, 0)], ps={"table": dict(device=SERVER), "v": dict(
        device=SERVER)}, ar={"b": {}})
    assignment = assign(analyze(item), read_entries(strategy), NodeContext("rep-test", 0, 2))
    nodes = nodes_by_name(Replicator(assignment)(item).item.graph_def)
    prefix = "AutoDist-Replica-0/"
    scatter = next(n for n in nodes.values() if n.name.startswith(prefix) and n.op == "ResourceScatterAdd")
    assert scatter.device == SERVER
    delta = nodes[scatter.input[2].split(":")[0]]          # -lr * clipped gradient rows
    assert delta.op == "Mul" and delta.device == SERVER
    assert nodes[delta.input[0].lstrip("^").split(":")[0]].device == SERVER   # the Neg before it
    norm = [n for name, n in nodes.items() if name.startswith(prefix + "clip/") and n.op == "Sqrt"]
    assert norm and all(n.device == device(0, 0) for n in norm)
    b_update = [n for name, n in nodes.items() if name.startswith(prefix) and "update_b" in name]
    assert b_update and all(n.device == device(0, 0) for n in b_update)

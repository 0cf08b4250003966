"""assignment.assign: replicas, parameter-server and all-reduce variables, shared ops and devices, keys."""
import pytest
import tensorflow as tf

from autodist.errors import TransformError
from autodist.kernel.analysis import analyze
from autodist.kernel.partitioner import Partitioner
from autodist.kernel.assignment import NodeContext, assign
from autodist.plan.contract import Compressor, read_entries
from autodist.plan.names import replica_prefix
from kernel_harness import AR, capture, device, make_strategy, tf1

T0C0, T0C1, T1C0 = device(0, 0), device(0, 1), device(1, 0)


def _build():
    x = tf1.placeholder(tf.float32, [None, 2], name="x")
    ids = tf1.placeholder(tf.int32, [None], name="ids")
    w = tf1.get_variable("w", initializer=tf.ones([2, 1]))
    b = tf1.get_variable("b", initializer=tf.zeros([1]))
    emb = tf1.get_variable("emb", initializer=tf.ones([5, 1]))
    loss = tf.reduce_mean(tf.matmul(x, w) + b) + tf.reduce_sum(tf.gather(emb, ids))
    return {"train": tf1.train.AdamOptimizer(0.1).minimize(loss)}


@pytest.fixture(scope="module")
def analysis():
    item, _ = capture(_build)
    return analyze(item)


def _strategy(**overrides):
    ps = {"w": dict(device=T1C0, sync=True, staleness=2, proxy=True), "emb": dict(device=T0C0, sync=False)}
    ar = {"b": dict(group=3, compressor=AR.HorovodCompressor)}
    ps.update(overrides.pop("ps", {}))
    return make_strategy(overrides.pop("replicas", [T0C0, T0C1, T1C0]), ps=ps, ar=ar, **overrides)


def _node(task=0, num_tasks=2, **kwargs):
    return NodeContext(job_id="assign-test", task_index=task, num_tasks=num_tasks, **kwargs)


def test_replicas_in_strategy_order_and_the_local_ones(analysis):
    assignment = assign(analysis, read_entries(_strategy()), _node(task=0))
    assert [(r.global_index, r.local_index, r.device, r.host_cpu) for r in assignment.replicas] == [
        (0, 0, T0C0, T0C0), (1, 1, T0C1, T0C0), (2, -1, T1C0, T1C0)]
    assert [r.device for r in assignment.local] == [T0C0, T0C1]
    assert assignment.local[1].prefix == replica_prefix(1) == "AutoDist-Replica-1/"
    assert assignment.num_replicas == 3
    other = assign(analysis, read_entries(_strategy()), _node(task=1))
    assert [(r.global_index, r.local_index) for r in other.local] == [(2, 0)]
    assert other.local[0].prefix == "AutoDist-Replica-0/"


def test_variable_assignments_follow_the_synchronizers(analysis):
    assignment = assign(analysis, read_entries(_strategy()), _node())
    w, emb, b = assignment.vars["w"], assignment.vars["emb"], assignment.vars["b"]
    ws, embs, bs = w.synchronizer, emb.synchronizer, b.synchronizer
    assert (w.kind, ws.destination, ws.sync, ws.staleness, ws.proxy, w.sparse) == ("ps", T1C0, True, 2, True, False)
    assert (emb.kind, embs.destination, embs.sync, emb.sparse) == ("ps", T0C0, False, True)
    assert (b.kind, bs.group, bs.compressor, bs.powersgd_rank) == ("ar", 3, AR.HorovodCompressor, 1)
    assert bs.compressor is Compressor.HorovodCompressor
    assert {v.op_name for v in assignment.ps_vars} == {"w", "emb"}
    assert [v.op_name for v in assignment.ar_vars] == ["b"]


def test_ps_state_and_shared_ops_live_on_the_server(analysis):
    assignment = assign(analysis, read_entries(_strategy()), _node())
    assert assignment.ps_state == {"w": "w", "w/Adam": "w", "w/Adam_1": "w",
                                   "emb": "emb", "emb/Adam": "emb", "emb/Adam_1": "emb"}
    for owned, owner in assignment.ps_state.items():
        for op in analysis.variables[owned].creation_ops:
            assert assignment.is_shared(op)
            assert assignment.shared_devices[op] == assignment.vars[owner].synchronizer.destination
    assert not any(assignment.is_shared(op) for op in ("b", "beta1_power", "MatMul"))
    # Everything else that is state gets one copy per replica.
    assert sorted(assignment.mirrored_vars) == ["b", "b/Adam", "b/Adam_1", "beta1_power", "beta2_power"]


def test_input_pipeline_is_shared_on_this_nodes_cpu():
    def build():
        iterator = tf1.data.make_one_shot_iterator(tf.data.Dataset.from_tensor_slices(tf.ones([4, 2])).batch(2))
        w = tf1.get_variable("w", initializer=tf.ones([2, 1]))
        return tf1.train.GradientDescentOptimizer(0.1).minimize(tf.reduce_sum(tf.matmul(iterator.get_next(), w)))
    item, _ = capture(build)
    analysis = analyze(item)
    strategy = make_strategy([T0C0, T1C0], ar={"w": {}})
    assignment = assign(analysis, read_entries(strategy), _node(task=1))
    assert analysis.input_pipeline and analysis.input_pipeline <= assignment.shared_ops
    assert {assignment.shared_devices[op] for op in analysis.input_pipeline} == {T1C0}


def test_collective_keys(analysis):
    explicit = assign(analysis, read_entries(_strategy()), _node(collective_key_base=700000))
    assert (explicit.key_base, explicit.group_key) == (700000, 7)
    derived = assign(analysis, read_entries(_strategy()), _node())
    again = assign(analysis, read_entries(_strategy()), _node(task=1))
    assert derived.key_base == again.key_base      # every node of a job derives the same keys
    assert derived.key_base % 100000 == 0 and derived.group_key == derived.key_base // 100000
    entries = read_entries(_strategy())
    bases = {assign(analysis, entries, NodeContext("job-{}".format(i), 0, 2)).key_base for i in range(5)}
    assert len(bases) > 1                          # another job, another window


def test_chief_replica_is_the_chiefs_first(analysis):
    assert assign(analysis, read_entries(_strategy()), _node()).chief_replica.device == T0C0
    assignment = assign(analysis, read_entries(_strategy()), _node(task=0, chief_task=1))
    assert assignment.chief_replica.device == T1C0 and not assignment.node.is_chief
    lonely = assign(analysis, read_entries(_strategy(replicas=[T1C0])), _node(task=1))
    with pytest.raises(TransformError, match="the chief .task 0. runs no replica"):
        lonely.chief_replica


def test_partitioned_variables_contribute_their_shards():
    def build():
        w = tf1.get_variable("w", initializer=tf.ones([4, 1]))
        return tf1.train.GradientDescentOptimizer(0.1).minimize(tf.reduce_sum(w))
    strategy = make_strategy([T0C0], ps={"w": dict(device=T0C0)}, partitions={"w": ("2,1", [])})
    item, _ = capture(build)
    partitioned = Partitioner(read_entries(strategy))(item).item
    assignment = assign(analyze(partitioned), read_entries(strategy), _node(num_tasks=1))
    assert sorted(assignment.vars) == ["w/part_0", "w/part_1"]
    assert all(v.kind == "ps" and v.synchronizer.destination == T0C0 for v in assignment.vars.values())


@pytest.mark.parametrize("replicas, node, message", [
    (["/job:worker/task:0/cpu:0"], _node(), "is not a compiled device name"),
    ([T0C0, device(2, 0)], _node(), "names task 2, but the job has 2 tasks"),
    ([T0C0], _node(task=1), "this node .task 1. runs none of the strategy's replicas"),
], ids=["uncompiled-device", "task-out-of-range", "no-local-replica"])
def test_replica_errors(analysis, replicas, node, message):
    with pytest.raises(TransformError, match=message):
        assign(analysis, read_entries(_strategy(replicas=replicas)), node)


def test_variable_errors_name_the_variable(analysis):
    missing = make_strategy([T0C0], ps={"w": dict(device=T0C0)}, ar={"b": {}})
    with pytest.raises(TransformError) as error:
        assign(analysis, read_entries(missing), _node(num_tasks=1))
    assert error.value.variable == "emb" and "no entry in the strategy" in str(error.value)

    no_destination = _strategy()
    next(n for n in no_destination.node_config if n.var_name == "w:0").PSSynchronizer.reduction_destination = ""
    with pytest.raises(TransformError) as error:
        assign(analysis, read_entries(no_destination), _node())
    assert (error.value.variable, error.value.pass_name) == ("w", "assign")
    assert "reduction_destination" in str(error.value)

    no_synchronizer = _strategy()
    node = next(n for n in no_synchronizer.node_config if n.var_name == "b:0")
    node.ClearField("AllReduceSynchronizer")
    with pytest.raises(TransformError, match="variable 'b': has no synchronizer"):
        assign(analysis, read_entries(no_synchronizer), _node())


def test_coupled_variables_cannot_be_synchronized_differently():
    def build():
        w = tf1.get_variable("w", initializer=tf.ones([2]))
        v = tf1.get_variable("v", initializer=tf.ones([2]))
        gw, gv = tf.gradients(tf.reduce_sum(w * v), [w, v])
        # v is updated from w's gradient too: the two are coupled (v has a gradient of its own: not w's slot)
        train = tf.group(w.assign_sub(gw), v.assign_sub(gw + gv))
        return gw, gv, w, v, train
    item, (gw, gv, w, v, train) = capture(build)
    item.extend_gradient_info([gw, gv], [w, v])
    item.extend_train_ops([train])
    analysis = analyze(item)
    assert analysis.slots["w"] == () and analysis.couplings == (frozenset({"w", "v"}),)
    strategy = make_strategy([T0C0], ps={"w": dict(device=T0C0)}, ar={"v": {}})
    with pytest.raises(TransformError, match="couples these variables' updates.*'v' \\(ar\\), 'w' \\(ps\\)"):
        assign(analysis, read_entries(strategy), _node(num_tasks=1))


def test_state_written_from_coupled_gradients_is_shared_and_kept_with_its_first_owner():
    def build():
        w = tf1.get_variable("w", initializer=tf.ones([2]))
        v = tf1.get_variable("v", initializer=tf.ones([2]))
        m = tf1.get_variable("m", initializer=tf.zeros([2]), trainable=False)
        scale = tf1.get_variable("scale", initializer=tf.ones([]), trainable=False)
        gw, gv = tf.gradients(tf.reduce_sum(w * v), [w, v])
        finite = tf.logical_and(tf.reduce_all(tf.math.is_finite(gw)), tf.reduce_all(tf.math.is_finite(gv)))
        m_new = m.assign_add(tf.where(finite, gw, 0.0))   # both gradients reach it; read into w's update only
        train = tf.group(w.assign_sub(tf.where(finite, m_new, 0.0)), v.assign_sub(tf.where(finite, gv, 0.0)),
                         scale.assign(tf.where(finite, scale * 2.0, scale * 0.5)))
        return gw, gv, w, v, train
    item, (gw, gv, w, v, train) = capture(build)
    item.extend_gradient_info([gw, gv], [w, v])
    item.extend_train_ops([train])
    analysis = analyze(item)
    assert analysis.slots == {"w": ("m",), "v": ()}
    assert analysis.shared_state == {"scale": ("v", "w")}
    assert analysis.owned_state("v") == ("scale",) and analysis.owned_state("w") == ("m",)
    strategy = make_strategy([T0C0], ps={"w": dict(device=T0C0), "v": dict(device=T0C0)})
    assignment = assign(analysis, read_entries(strategy), _node(num_tasks=1))
    assert assignment.ps_state == {"w": "w", "m": "w", "v": "v", "scale": "v"}

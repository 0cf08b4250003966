"""autodist.checkpoint.Saver: the original layout, cross-strategy resume, plain tf1 interop, errors.

The oracle: k steps under strategy A, save, restore into a fresh session under
strategy B, k more steps == 2k uninterrupted single-device steps, for every
variable including Adam's slots and beta powers.
"""
import os
import types

import numpy as np
import pytest
import tensorflow as tf

from autodist import AutoDist
from autodist.checkpoint import SavedModelBuilder, Saver
from autodist.errors import CheckpointError
from autodist.strategies import PS, AllReduce, Parallax, PartitionedAR, PSLoadBalancing, RandomAxisPartitionAR

from ckpt_models import STEPS, Dense, Wide, assert_same_state, distributed, single_device, write_spec

FIRST, SECOND = range(STEPS), range(STEPS, 2 * STEPS)


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    return write_spec(tmp_path_factory.mktemp("spec"))


@pytest.fixture(scope="module")
def dense_reference():
    problem = Dense()
    return problem, single_device(problem, range(2 * STEPS))


@pytest.mark.parametrize("first, second", [
    (PS(), AllReduce()),
    (AllReduce(), PS()),
    (PSLoadBalancing(), Parallax()),
    (PS(local_proxy_variable=True), AllReduce()),
    (AllReduce(), PS(local_proxy_variable=True)),
], ids=["PS-to-AllReduce", "AllReduce-to-PS", "PSLoadBalancing-to-Parallax", "PSproxy-to-AllReduce",
        "AllReduce-to-PSproxy"])
def test_resume_under_another_strategy_matches_uninterrupted_training(spec, tmp_path, dense_reference, first,
                                                                      second):
    problem, expected = dense_reference
    _, path, _, _ = distributed(spec, first, problem, FIRST, save=str(tmp_path / "model"))
    resumed, _, _, _ = distributed(spec, second, problem, SECOND, restore=path)
    assert_same_state(expected, resumed)


@pytest.mark.parametrize("first, second", [
    (PartitionedAR(), PS()),
    (AllReduce(), RandomAxisPartitionAR()),
], ids=["PartitionedAR-to-PS", "AllReduce-to-RandomAxisPartitionAR"])
def test_partitioned_variables_are_saved_whole_and_restored_into_shards(spec, tmp_path, first, second):
    problem = Wide()
    expected = single_device(problem, range(2 * STEPS))
    first_state, path, session, _ = distributed(spec, first, problem, FIRST, save=str(tmp_path / "model"))
    if isinstance(first, PartitionedAR):
        assert "E" in session.transform_result.partitions
    shapes = dict(tf.train.list_variables(path))
    assert shapes["E"] == [2100, 512] and shapes["E/Adam"] == [2100, 512] and "E/part_0" not in shapes
    resumed, _, session, _ = distributed(spec, second, problem, SECOND, restore=path)
    if isinstance(second, RandomAxisPartitionAR):
        assert "E" in session.transform_result.partitions
    assert_same_state(expected, resumed)


def test_checkpoint_has_the_single_device_layout(spec, tmp_path, dense_reference):
    problem, _ = dense_reference
    trained, path, _, _ = distributed(spec, PS(), problem, FIRST, save=str(tmp_path / "model"))
    names = {name for name, _ in tf.train.list_variables(path)}
    assert names == set(trained)          # original names only: no replica prefixes, no autodist state
    assert {"W/Adam", "W/Adam_1", "beta1_power", "beta2_power"} <= names
    reader = tf.train.load_checkpoint(path)
    for name, value in trained.items():
        np.testing.assert_array_equal(reader.get_tensor(name), value)


def test_plain_tf1_saver_resumes_a_distributed_checkpoint(spec, tmp_path, dense_reference):
    problem, expected = dense_reference
    _, path, _, _ = distributed(spec, AllReduce(), problem, FIRST, save=str(tmp_path / "model"))
    graph = tf.Graph()
    with graph.as_default():
        model = problem.build()
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session(graph=graph) as session:
            saver.restore(session, path)
            for step in SECOND:
                session.run(model["train"], problem.feed(model, step))
            resumed = {v.op.name: session.run(v) for v in tf.compat.v1.global_variables()}
    assert_same_state(expected, resumed)


def test_distributed_session_resumes_a_plain_tf1_checkpoint(spec, tmp_path, dense_reference):
    problem, expected = dense_reference
    graph = tf.Graph()
    with graph.as_default():
        model = problem.build()
        with tf.compat.v1.Session(graph=graph) as session:
            session.run(tf.compat.v1.global_variables_initializer())
            for step in FIRST:
                session.run(model["train"], problem.feed(model, step))
            path = tf.compat.v1.train.Saver().save(session, str(tmp_path / "plain"))
    resumed, _, _, _ = distributed(spec, PS(), problem, SECOND, restore=path)
    assert_same_state(expected, resumed)


def test_meta_graph_is_the_single_device_graph_with_a_plain_saver(spec, tmp_path, dense_reference):
    problem, _ = dense_reference
    trained, path, _, _ = distributed(spec, AllReduce(), problem, FIRST, save=str(tmp_path / "model"))
    graph = tf.Graph()
    with graph.as_default():
        saver = tf.compat.v1.train.import_meta_graph(path + ".meta")
        assert not [op.name for op in graph.get_operations() if op.name.startswith("AutoDist-")]
        with tf.compat.v1.Session(graph=graph) as session:
            saver.restore(session, path)
            prediction = session.run("prediction:0", {"x:0": problem.x[0]})
    np.testing.assert_allclose(prediction, _predict(trained, problem.x[0]), rtol=1e-5, atol=1e-6)


def _predict(values, x):
    return np.maximum(x @ values["W"] + values["b"], 0) @ values["V"]


def test_bookkeeping_keeps_max_to_keep_and_the_state_file(spec, tmp_path, dense_reference):
    problem, _ = dense_reference
    ad = AutoDist(spec, PS())
    with tf.Graph().as_default(), ad.scope():
        model = problem.build()
        saver = Saver(max_to_keep=2)
        session = ad.create_distributed_session()
        paths = []
        for i in range(3):
            session.run(model["train"], problem.feed(model, i))
            paths.append(saver.save(session, str(tmp_path / "m"), global_step=i, write_meta_graph=False))
    assert paths == [str(tmp_path / "m-{}".format(i)) for i in range(3)]
    assert saver.last_checkpoints == paths[1:]
    assert tf.train.latest_checkpoint(str(tmp_path)) == paths[-1]
    assert not os.path.exists(paths[0] + ".index") and os.path.exists(paths[1] + ".index")


def test_restore_refuses_a_checkpoint_that_does_not_fit(spec, tmp_path, dense_reference):
    problem, _ = dense_reference
    graph = tf.Graph()
    with graph.as_default():
        tf.Variable(tf.zeros([5, 3]), name="W")        # wrong shape, and b, V, slots missing
        with tf.compat.v1.Session(graph=graph) as session:
            session.run(tf.compat.v1.global_variables_initializer())
            other = tf.compat.v1.train.Saver().save(session, str(tmp_path / "other"))
    ad = AutoDist(spec, AllReduce())
    with tf.Graph().as_default(), ad.scope():
        problem.build()
        saver = Saver()
        session = ad.create_distributed_session()
        with pytest.raises(CheckpointError, match="has no variable"):
            saver.restore(session, other)
        with pytest.raises(CheckpointError, match="shape"):
            Saver(var_list={"W": tf.compat.v1.global_variables()[0]}).restore(session, other)
        with pytest.raises(CheckpointError, match="cannot read a checkpoint"):
            saver.restore(session, str(tmp_path / "nothing-here"))
        with pytest.raises(CheckpointError, match="save_path=None"):
            saver.restore(session, None)


def test_var_list_dict_renames_and_restores_a_subset(spec, tmp_path, dense_reference):
    problem, _ = dense_reference
    ad = AutoDist(spec, PS())
    with tf.Graph().as_default(), ad.scope():
        model = problem.build()
        w = [v for v in tf.compat.v1.global_variables() if v.op.name == "W"][0]
        saver = Saver(var_list={"weights": w})
        session = ad.create_distributed_session()
        path = saver.save(session, str(tmp_path / "subset"))
        assert [name for name, _ in tf.train.list_variables(path)] == ["weights"]
        before = session.run(w)
        session.run(model["train"], problem.feed(model, 0))
        assert not np.allclose(session.run(w), before)
        saver.restore(session, path)
        np.testing.assert_array_equal(session.run(w), before)


def test_unsupported_arguments_and_eager_construction_are_refused():
    with tf.Graph().as_default():
        tf.Variable(1.0)
        with pytest.raises(CheckpointError, match="reshape"):
            Saver(reshape=True)
        with pytest.raises(CheckpointError, match="V2"):
            Saver(write_version=1)
    with tf.Graph().as_default():
        empty = Saver()                   # the variables are taken when a session is bound
        with pytest.raises(CheckpointError, match="no variables"):
            empty.specs
        assert Saver(allow_empty=True).specs == {}
    with pytest.raises(CheckpointError, match="scope"):
        Saver()


def test_plain_session_of_the_users_graph_is_served_by_a_plain_saver(tmp_path, dense_reference):
    problem, expected = dense_reference
    graph = tf.Graph()
    with graph.as_default():
        model = problem.build()
        saver = Saver()
        with tf.compat.v1.Session(graph=graph) as session:
            session.run(tf.compat.v1.global_variables_initializer())
            for step in FIRST:
                session.run(model["train"], problem.feed(model, step))
            path = saver.save(session, str(tmp_path / "plain"))
            session.run(tf.compat.v1.global_variables_initializer())
            saver.restore(session, path)
            for step in SECOND:
                session.run(model["train"], problem.feed(model, step))
            resumed = {v.op.name: session.run(v) for v in tf.compat.v1.global_variables()}
    assert_same_state(expected, resumed)


def test_only_the_chief_writes(tmp_path):
    """On another node, a chief_only save and export return the chief's paths and run nothing (its session
    is never used)."""
    graph = tf.Graph()
    with graph.as_default():
        tf.Variable(1.0, name="v")
        saver = Saver(chief_only=True)
    node = types.SimpleNamespace(is_chief=False)
    result = types.SimpleNamespace(assignment=types.SimpleNamespace(node=node))
    session = types.SimpleNamespace(graph=graph, distributed_graph=None, transform_result=result)
    assert saver.save(session, str(tmp_path / "model"), global_step=3) == str(tmp_path / "model-3")
    assert saver.last_checkpoints == []
    builder = SavedModelBuilder(str(tmp_path / "export"))
    builder.add_meta_graph_and_variables(session, ["serve"])
    builder.add_meta_graph(["other"])
    assert builder.save() == str(tmp_path / "export" / "saved_model.pb").encode()
    assert list(tmp_path.iterdir()) == []

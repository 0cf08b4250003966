"""autodist.checkpoint.SavedModelBuilder: the single-device graph, signatures and the session's values."""
import numpy as np
import pytest
import tensorflow as tf

from autodist import AutoDist
from autodist.checkpoint import SavedModelBuilder
from autodist.errors import CheckpointError
from autodist.strategies import PS, PartitionedAR

from ckpt_models import STEPS, Dense, Wide, write_spec


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    return write_spec(tmp_path_factory.mktemp("spec"))


def _export(spec, builder, problem, export_dir):
    """Train STEPS under ``builder``, export; returns (predictions of the distributed session, export path)."""
    ad = AutoDist(spec, builder)
    with tf.Graph().as_default(), ad.scope():
        model = problem.build()
        session = ad.create_distributed_session()
        for step in range(STEPS):
            session.run(model["train"], problem.feed(model, step))
        predicted = session.run(model["prediction"], {model["x"]: problem.x[-1]})
        signature = tf.compat.v1.saved_model.predict_signature_def({"x": model["x"]},
                                                                    {"prediction": model["prediction"]})
        builder = SavedModelBuilder(export_dir)
        builder.add_meta_graph_and_variables(session, ["serve"], signature_def_map={"serving_default": signature})
        builder.add_meta_graph(["extra"], signature_def_map={"predict": signature})
        path = builder.save()
    return predicted, path


def _serve(export_dir, tags, key, x):
    graph = tf.Graph()
    with tf.compat.v1.Session(graph=graph) as session:
        meta = tf.compat.v1.saved_model.loader.load(session, tags, export_dir)
        signature = meta.signature_def[key]
        return session.run(signature.outputs["prediction"].name, {signature.inputs["x"].name: x})


@pytest.mark.parametrize("builder, problem", [(PS(), Dense()), (PartitionedAR(), Wide())],
                         ids=["PS", "PartitionedAR"])
def test_plain_loader_serves_the_export_with_the_trained_values(spec, tmp_path, builder, problem):
    export_dir = str(tmp_path / "export")
    predicted, path = _export(spec, builder, problem, export_dir)
    assert path == (export_dir + "/saved_model.pb").encode()
    served = _serve(export_dir, ["serve"], "serving_default", problem.x[-1])
    np.testing.assert_allclose(served, predicted, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_serve(export_dir, ["extra"], "predict", problem.x[-1]), predicted, rtol=1e-5,
                               atol=1e-6)


def test_builder_order_is_checked(tmp_path):
    builder = SavedModelBuilder(str(tmp_path / "export"))
    with pytest.raises(CheckpointError, match="before save"):
        builder.save()
    with pytest.raises(CheckpointError, match="before add_meta_graph"):
        builder.add_meta_graph(["serve"])


def test_plain_session_export(tmp_path):
    problem = Dense()
    graph = tf.Graph()
    with graph.as_default():
        model = problem.build()
        with tf.compat.v1.Session(graph=graph) as session:
            session.run(tf.compat.v1.global_variables_initializer())
            predicted = session.run(model["prediction"], {model["x"]: problem.x[0]})
            builder = SavedModelBuilder(str(tmp_path / "plain"))
            builder.add_meta_graph_and_variables(session, ["serve"], signature_def_map={
                "serving_default": tf.compat.v1.saved_model.predict_signature_def(
                    {"x": model["x"]}, {"prediction": model["prediction"]})})
            builder.save()
    np.testing.assert_allclose(_serve(str(tmp_path / "plain"), ["serve"], "serving_default", problem.x[0]),
                               predicted, rtol=1e-6)


def test_saved_model_builder_accepts_the_saver_argument(spec, tmp_path):
    """AutoDist's guide passes its Saver: accepted when it saves every global variable under its name."""
    from autodist.checkpoint import Saver
    from autodist.checkpoint.saved_model_builder import SavedModelBuilder as AutoDistPath
    problem = Dense()
    ad = AutoDist(spec, PS())
    with tf.Graph().as_default(), ad.scope():
        model = problem.build()
        saver, subset = Saver(), Saver(var_list=tf.compat.v1.trainable_variables()[:1])
        session = ad.create_distributed_session()
        session.run(model["train"], problem.feed(model, 0))
        predicted = session.run(model["prediction"], {model["x"]: problem.x[0]})
        signature = tf.compat.v1.saved_model.predict_signature_def({"x": model["x"]},
                                                                    {"prediction": model["prediction"]})
        with pytest.raises(CheckpointError, match="does not save every global variable"):
            SavedModelBuilder(str(tmp_path / "refused")).add_meta_graph_and_variables(
                session, ["serve"], saver=subset)
        with pytest.raises(CheckpointError, match="autodist.checkpoint.Saver"):
            SavedModelBuilder(str(tmp_path / "refused")).add_meta_graph_and_variables(
                session, ["serve"], saver=object())
        builder = AutoDistPath(str(tmp_path / "export"))
        builder.add_meta_graph_and_variables(sess=session, tags=["serve"], saver=saver,
                                             signature_def_map={"serving_default": signature})
        builder.add_meta_graph(["extra"], saver=saver, signature_def_map={"predict": signature})
        builder.save()
    np.testing.assert_allclose(_serve(str(tmp_path / "export"), ["serve"], "serving_default", problem.x[0]),
                               predicted, rtol=1e-5, atol=1e-6)

"""The top-level API: a small pinned namespace, an import without side effects, AutoDist.scope()."""
import json
import os
import subprocess
import sys
import textwrap

import pytest
import tensorflow as tf
import keras

import autodist
from autodist.errors import LaunchError, SessionError
from autodist.capture.graph_item import get_default_graph_item
from autodist.runtime.context import ENV_VAR, JobContext

tf1 = tf.compat.v1
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TWO_NODES = os.path.join(ROOT, "resource_specs", "loopback_two_nodes.yml")
ONE_NODE = os.path.join(ROOT, "resource_specs", "single_node_cpu.yml")


def test_top_level_namespace_is_pinned():
    assert sorted(autodist.__all__) == ["AutoDist", "ResourceSpec", "__version__", "errors", "strategies"]
    assert autodist.AutoDist.__name__ == "AutoDist"
    with pytest.raises(AttributeError, match="no attribute 'graph_editor_magic'"):
        autodist.graph_editor_magic


_IMPORT_PROBE = textwrap.dedent("""
    import json, os, sys
    before_env = dict(os.environ)
    before_cwd = set(os.listdir("."))
    home = os.path.expanduser("~/.autodist")
    existed = os.path.exists(home)
    import autodist, autodist.resource_spec, autodist.spec, autodist.cli, autodist.strategies
    import autodist.strategy, autodist.strategy.base, autodist.strategy.ps_lb_strategy, autodist.autodist
    print(json.dumps({
        "tensorflow_imported": "tensorflow" in sys.modules,
        "env_changed": dict(os.environ) != before_env,
        "cwd_changed": set(os.listdir(".")) != before_cwd,
        "home_created": os.path.exists(home) and not existed,
    }))
""")


def test_import_has_no_side_effects(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    env["HOME"] = str(tmp_path)
    out = subprocess.run([sys.executable, "-c", _IMPORT_PROBE], cwd=str(tmp_path), env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {
        "tensorflow_imported": False, "env_changed": False, "cwd_changed": False, "home_created": False}


def test_scope_in_eager_mode_enters_the_autodists_own_graph():
    """As tf.distribute's ``with strategy.scope():``: the same graph at every entry, eager again after it,
    also when the block raises."""
    ad = autodist.AutoDist(ONE_NODE)
    with ad.scope():
        assert not tf.executing_eagerly()
        graph = tf.compat.v1.get_default_graph()
        tf.Variable(1.0, name="v")
    assert tf.executing_eagerly() and ad.graph_item.graph is graph
    with pytest.raises(ValueError, match="inside"):
        with ad.scope():
            assert tf.compat.v1.get_default_graph() is graph
            raise ValueError("inside")
    assert tf.executing_eagerly() and [v.op.name for v in ad.graph_item.graph.get_collection("variables")] == ["v"]


def test_scope_makes_the_default_graph_item_and_restores_optimizers():
    ad = autodist.AutoDist(ONE_NODE)
    original = keras.optimizers.Adam.__dict__["__init__"]
    with tf.Graph().as_default() as graph:
        with pytest.raises(ValueError, match="inside"):
            with ad.scope():
                assert get_default_graph_item() is ad.graph_item
                assert ad.graph_item.graph is graph
                assert keras.optimizers.Adam.__dict__["__init__"] is not original
                raise ValueError("failure inside the scope")
    assert keras.optimizers.Adam.__dict__["__init__"] is original
    assert get_default_graph_item() is None


def test_roles_of_the_chief():
    ad = autodist.AutoDist(TWO_NODES)
    assert ad.is_chief and ad.worker_index == 0 and ad.num_workers == 2


def test_roles_from_the_job_environment(monkeypatch, tmp_path):
    job = JobContext(job_id="j", address="127.0.0.2", servers={"127.0.0.1": "127.0.0.1:1", "127.0.0.2": "127.0.0.2:2"},
                     chief="127.0.0.1", strategy_path=str(tmp_path / "s.pb"))
    monkeypatch.setenv(ENV_VAR, job.to_env()[ENV_VAR])
    ad = autodist.AutoDist(TWO_NODES)
    assert not ad.is_chief and ad.worker_index == 1 and ad.num_workers == 2


def test_a_job_node_missing_from_the_spec_is_refused(monkeypatch, tmp_path):
    job = JobContext(job_id="j", address="127.0.0.9", servers={"127.0.0.1": "a:1", "127.0.0.9": "b:2"},
                     chief="127.0.0.1", strategy_path=str(tmp_path / "s.pb"))
    with pytest.raises(LaunchError, match="127.0.0.9"):
        autodist.AutoDist(TWO_NODES, job=job)


def test_session_needs_a_captured_graph_and_gradients():
    ad = autodist.AutoDist(ONE_NODE)
    with pytest.raises(SessionError, match="ad.scope"):
        ad.create_distributed_session()
    with tf.Graph().as_default(), ad.scope():
        tf1.get_variable("v", initializer=1.0)
        with pytest.raises(SessionError, match="apply_gradients"):
            ad.create_distributed_session()


def test_default_strategy_is_ps_load_balancing():
    assert type(autodist.AutoDist(ONE_NODE).strategy_builder).__name__ == "PSLoadBalancing"


@pytest.mark.parametrize("public, home", [
    ("autodist.graph_item", "autodist.capture.graph_item"),
    ("autodist.resource_spec", "autodist.spec.resource_spec"),
    ("autodist.strategy", "autodist.strategies"),                  # AutoDist 0.7's import paths
    ("autodist.strategy.base", "autodist.strategies.base"),
    ("autodist.strategy.ps_strategy", "autodist.strategies.ps"),
    ("autodist.strategy.ps_lb_strategy", "autodist.strategies.ps_load_balancing"),
    ("autodist.strategy.partitioned_ps_strategy", "autodist.strategies.partitioned_ps"),
    ("autodist.strategy.uneven_partition_ps_strategy", "autodist.strategies.partitioned_ps"),
    ("autodist.strategy.all_reduce_strategy", "autodist.strategies.all_reduce"),
    ("autodist.strategy.partitioned_all_reduce_strategy", "autodist.strategies.partitioned_ar"),
    ("autodist.strategy.random_axis_partition_all_reduce_strategy", "autodist.strategies.partitioned_ar"),
    ("autodist.strategy.parallax_strategy", "autodist.strategies.parallax"),
    ("autodist.strategy.auto_strategy", "autodist.strategies.auto"),
    ("autodist.checkpoint.saved_model_builder", "autodist.checkpoint.saved_model"),
])
def test_public_paths_of_moved_modules_name_the_same_objects(public, home):
    import importlib
    public_module, home_module = importlib.import_module(public), importlib.import_module(home)
    assert public_module.__all__
    for name in public_module.__all__:
        assert getattr(public_module, name) is getattr(home_module, name), name


def test_sync_batch_norm_is_a_switch():
    from autodist.errors import StrategyError
    with pytest.raises(StrategyError, match=r"AutoDist\(sync_batch_norm='yes'\): expected True or False"):
        autodist.AutoDist(ONE_NODE, sync_batch_norm="yes")

"""``autodist plan`` on GraphItem files and scripts, and its error contract (exit 2)."""
import json
import pathlib
import textwrap

import pytest

from autodist import cli
from autodist.cli.plan import make_builder, parse_builder_args
from autodist.errors import StrategyError
from autodist.strategies import Parallax, RandomAxisPartitionAR

SPECS = pathlib.Path(__file__).resolve().parents[2] / "resource_specs"
TWO_NODES = str(SPECS / "loopback_two_nodes.yml")


@pytest.fixture(scope="module")
def item_file(graph_item, tmp_path_factory):
    path = tmp_path_factory.mktemp("plan") / "model.graph_item"
    graph_item.serialize(str(path))
    return str(path)


def run(capsys, *argv):
    status = cli.main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_table_for_a_graph_item_file(capsys, item_file):
    status, out, err = run(capsys, "plan", "-r", TWO_NODES, "-s", "PSLoadBalancing", item_file)
    assert status == 0, err
    lines = out.splitlines()
    assert "built by PSLoadBalancing(local_proxy_variable=False, sync=True, staleness=0)" in lines[0]
    assert lines[1] == "replicas (2): 127.0.0.1:CPU:0, 127.0.0.2:CPU:0"
    names = [line.split()[0] for line in lines[4:8]]
    assert names == ["W:0", "b:0", "emb:0", "loop_w:0"]
    assert "imbalance λ = " in lines[-1]


def test_json_with_arguments(capsys, item_file):
    status, out, err = run(capsys, "plan", "-r", TWO_NODES, "-s", "AllReduce", "--arg",
                           "chunk_size=2", "--arg", "all_reduce_spec=RING", "--format", "json",
                           item_file)
    assert status == 0, err
    data = json.loads(out)
    assert [(v["name"], v["synchronizer"], v["placement"]) for v in data["variables"]] == [
        ("W:0", "AllReduce", [0]), ("b:0", "AllReduce", [0]), ("emb:0", "AllReduce", [1]),
        ("loop_w:0", "AllReduce", [1])]
    assert data["variables"][0]["shape"] == [4, 3] and data["variables"][0]["bytes"] == 48
    assert data["imbalance"] == 1.0 and len(data["devices"]) == 2
    assert data["builder"] == "AllReduce(chunk_size=2, all_reduce_spec='RING', " \
                              "compressor='NoneCompressor', bucket_bytes=16777216)"


def test_options_after_the_file_and_the_default_builder(capsys, item_file):
    status, out, err = run(capsys, "plan", "-r", TWO_NODES, item_file, "--format", "json")
    assert status == 0, err
    assert json.loads(out)["builder"].startswith("PSLoadBalancing(")
    status, out, err = run(capsys, "plan", item_file, "-r", TWO_NODES, "-s", "PS",
                           "--arg", "sync=False", "--format", "json")
    assert status == 0, err
    assert json.loads(out)["builder"] == "PS(local_proxy_variable=False, sync=False, staleness=0)"


@pytest.mark.parametrize("argv, message", [
    (["-s", "Magic"], "unknown strategy builder 'Magic'; choose one of: PS, PSLoadBalancing"),
    (["-s", "PS", "--arg", "chunk_size=4"], "PS has no argument 'chunk_size'; its arguments "
                                             "are: local_proxy_variable, sync, staleness"),
    (["-s", "PS", "--arg", "staleness=-1"], "PS: staleness must be an integer >= 0"),
    (["-s", "PS", "--arg", "sync"], "--arg 'sync': expected KEY=VALUE"),
    (["--arg", "sync=False"], "--arg needs -s/--strategy"),
    (["-s", "AllReduce", "--arg", "compressor=Zip"], "compressor must be one of"),
], ids=["builder", "unknown-arg", "bad-value", "malformed", "arg-without-builder", "compressor"])
def test_bad_builders_are_user_errors(capsys, item_file, argv, message):
    status, out, err = run(capsys, "plan", "-r", TWO_NODES, *argv, item_file)
    assert status == 2 and out == ""
    assert err.startswith("autodist: error: ") and message in err


def test_missing_inputs_are_user_errors(capsys, item_file, tmp_path):
    status, _, err = run(capsys, "plan", item_file)
    assert status == 2 and "needs a resource spec: add -r SPEC" in err
    status, _, err = run(capsys, "plan", "-r", TWO_NODES, str(tmp_path / "missing.pb"))
    assert status == 2 and "missing.pb" in err
    status, _, err = run(capsys, "plan", "-r", TWO_NODES, item_file, "extra")
    assert status == 2 and "takes no arguments (got extra)" in err
    status, _, err = run(capsys, "plan", "-r", TWO_NODES, str(tmp_path / "missing.py"))
    assert status == 2 and "missing.py" in err


def test_builder_argument_parsing():
    assert parse_builder_args(["sync=False", "chunk_size=64", "seed=None", "all_reduce_spec=RING",
                               "name=a=b"]) == {"sync": False, "chunk_size": 64, "seed": None,
                                                "all_reduce_spec": "RING", "name": "a=b"}
    with pytest.raises(StrategyError):
        parse_builder_args(["=3"])
    assert repr(make_builder("RandomAxisPartitionAR", {"seed": 3})) == \
        repr(RandomAxisPartitionAR(seed=3))
    assert isinstance(make_builder("Parallax", {}), Parallax)


SCRIPT = textwrap.dedent("""\
    import sys
    import tensorflow as tf
    from autodist import AutoDist
    from autodist.strategies import PS

    tf1 = tf.compat.v1
    rows = int(sys.argv[sys.argv.index("--rows") + 1])
    ad = AutoDist({spec!r}, strategy_builder=PS())
    with tf.Graph().as_default(), ad.scope():
        ids = tf1.placeholder(tf.int32, [None])
        x = tf1.placeholder(tf.float32, [None, 2])
        emb = tf1.get_variable("emb", initializer=tf.zeros([rows, 2]))
        w = tf1.get_variable("w", initializer=tf.zeros([2, 1]))
        loss = tf.reduce_sum(tf.gather(emb, ids)) + tf.reduce_sum(tf.matmul(x, w))
        train = tf1.train.GradientDescentOptimizer(0.1).minimize(loss)
        sess = ad.create_distributed_session()
        raise RuntimeError("plan must stop the script at its session request")
    """)


def test_script_stops_at_its_session_request(capsys, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT.format(spec=TWO_NODES))
    status, out, err = run(capsys, "plan", "--format", "json", str(script), "--rows", "7")
    assert status == 0, err
    data = json.loads(out)
    assert data["builder"].startswith("PS(") and data["replicas"] == ["127.0.0.1:CPU:0",
                                                                      "127.0.0.2:CPU:0"]
    assert [(v["name"], v["shape"], v["sparse"]) for v in data["variables"]] == [
        ("emb:0", [7, 2], True), ("w:0", [2, 1], False)]
    # command-line options win over the script's own builder and spec
    spec = tmp_path / "one.yml"
    spec.write_text("nodes:\n  - address: 127.0.0.1\n    cpus: [0, 1]\n")
    status, out, err = run(capsys, "plan", "-s", "Parallax", "-r", str(spec), "--format", "json",
                           str(script), "--rows", "5")
    assert status == 0, err
    data = json.loads(out)
    assert data["builder"].startswith("Parallax(") and len(data["replicas"]) == 2
    assert [v["synchronizer"] for v in data["variables"]] == ["PS", "AllReduce"]


@pytest.mark.parametrize("body, message", [
    ("print('hello')\n", "finished without asking for a distributed session"),
    ("import sys\nsys.exit(3)\n", "exited (status 3) before asking"),
], ids=["finishes", "exits"])
def test_scripts_that_never_ask_for_a_session(capsys, tmp_path, body, message):
    script = tmp_path / "noop.py"
    script.write_text(body)
    status, _, err = run(capsys, "plan", "-r", TWO_NODES, str(script))
    assert status == 2 and message in err


def test_the_script_sees_its_arguments_and_directory(capsys, tmp_path):
    (tmp_path / "helper_module_for_plan.py").write_text("VALUE = 41\n")
    script = tmp_path / "args.py"
    script.write_text("import sys, helper_module_for_plan\n"
                      "print(sys.argv, helper_module_for_plan.VALUE + 1, __name__)\n")
    status, out, _ = run(capsys, "plan", "-r", TWO_NODES, str(script), "--epochs", "3")
    assert status == 2
    assert out.strip() == "{!r} 42 __main__".format([str(script), "--epochs", "3"])


def test_png_dot_and_graph_dumps(capsys, item_file, tmp_path):
    import glob
    import tensorflow as tf
    png, dot, graphs = tmp_path / "plan.png", tmp_path / "plan.dot", tmp_path / "graphs"
    status, out, err = run(capsys, "plan", "-r", TWO_NODES, "-s", "PS", item_file, "--png", str(png),
                           "--dot", str(dot), "--dump-graphs", str(graphs))
    assert status == 0, err
    assert out.splitlines()[0].startswith("strategy ")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and dot.read_text().startswith("graph plan {")
    runs = sorted(p.name for p in graphs.iterdir())
    assert runs == ["00-captured", "01-partition", "02-replicate", "03-sync_in_graph", "04-sync_between_graph",
                    "05-finalize"]
    for name in runs:
        events = tf.compat.v1.train.summary_iterator(glob.glob(str(graphs / name / "events.*"))[0])
        assert any(e.graph_def for e in events), name
    assert "wrote {}".format(png) in err and "wrote 6 graphs" in err


# -- unmodified scripts, as autodist run captures them (issue 33, item 6) ---------------------------------

TF1_SCRIPT = textwrap.dedent("""\
    import tensorflow as tf

    tf1 = tf.compat.v1
    with tf.Graph().as_default():
        x = tf1.placeholder(tf.float32, [None, 3])
        y = tf1.placeholder(tf.float32, [None, 1])
        w = tf1.get_variable("w", initializer=tf.zeros([3, 1]))
        b = tf1.get_variable("b", initializer=tf.zeros([1]))
        loss = tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y))
        step = tf1.train.get_or_create_global_step()
        train = tf1.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=step)
        {session}
            for i in range(3):
                sess.run(train, {{x: [[1.0, 2.0, 3.0]], y: [[1.0]]}})
                open({marker!r}, "a").write("trained step {{}}\\n".format(i))
    """)
SESSIONS = {"session": "with tf1.Session() as sess:\n        sess.run(tf1.global_variables_initializer())",
            "monitored": "with tf1.train.MonitoredTrainingSession() as sess:"}


@pytest.mark.parametrize("session", sorted(SESSIONS))
def test_an_unmodified_tf1_script_is_planned_at_its_first_session_without_training(capsys, tmp_path, session):
    """Before: the script trained to its end on one device, then plan asked for ad.create_distributed_session()."""
    marker = tmp_path / "trained.txt"
    script = tmp_path / "train.py"
    script.write_text(TF1_SCRIPT.format(session=SESSIONS[session], marker=str(marker)))
    status, out, err = run(capsys, "plan", "-r", TWO_NODES, "-s", "AllReduce", "--format", "json", str(script))
    assert status == 0, err
    data = json.loads(out)
    assert data["builder"].startswith("AllReduce(") and len(data["replicas"]) == 2
    assert sorted(v["name"] for v in data["variables"]) == ["b:0", "w:0"]
    assert not marker.exists(), "plan stops the script at its first session"


def test_an_unmodified_script_needs_the_cluster_and_is_not_trained_without_it(capsys, tmp_path):
    marker = tmp_path / "trained.txt"
    script = tmp_path / "train.py"
    script.write_text(TF1_SCRIPT.format(session=SESSIONS["session"], marker=str(marker)))
    status, out, err = run(capsys, "plan", str(script))
    assert status == 2 and out == ""
    assert "has no AutoDist of its own" in err and "give the cluster with -r SPEC" in err
    assert not marker.exists()


KERAS_SCRIPT = textwrap.dedent("""\
    import keras
    import numpy as np

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(5), keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss="mse")
    model.fit(np.ones((8, 4), np.float32), np.ones((8, 2), np.float32), batch_size=4, verbose=0)
    raise SystemExit("plan must stop the script at its first fit")
    """)


def test_an_unmodified_keras_script_is_planned_at_its_first_fit(capsys, tmp_path):
    script = tmp_path / "fit.py"
    script.write_text(KERAS_SCRIPT)
    status, out, err = run(capsys, "plan", "-r", TWO_NODES, "-s", "PS", "--format", "json", str(script))
    assert status == 0, err
    variables = {v["name"]: tuple(v["shape"]) for v in json.loads(out)["variables"]}
    model = sorted(shape for name, shape in variables.items() if not name.startswith("autodist_metrics/"))
    assert model == [(2,), (4, 5), (5,), (5, 2)]   # and the accumulators fit synchronizes its metrics with


# -- what plan prints (issue 33, item 12) --------------------------------------------------------------

def test_plan_prints_no_tensorflow_start_up_messages(item_file):
    import os
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    result = subprocess.run([sys.executable, "-m", "autodist", "plan", "-r", TWO_NODES, "-s", "PS", item_file],
                            capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "absl::InitializeLog" not in result.stderr and "oneDNN" not in result.stderr, result.stderr[-3000:]
    assert "cpu_feature_guard" not in result.stderr and result.stdout.startswith("strategy ")


def test_png_without_matplotlib_says_which_extra_to_install(capsys, item_file, tmp_path, monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "matplotlib", None)   # import matplotlib raises ImportError
    status, out, err = run(capsys, "plan", "-r", TWO_NODES, "-s", "PS", item_file, "--png", str(tmp_path / "p.png"))
    assert status == 2 and out == ""
    assert err.startswith("autodist: error: autodist plan --png draws with matplotlib, which is not installed")
    assert 'pip install "autodist[examples]"' in err and len(err.splitlines()) == 1
    assert not (tmp_path / "p.png").exists()

"""The plan as a picture: links weighted by the report's traffic model, DOT text, a readable PNG."""
import pytest

from autodist.strategies import PS, AllReduce, PSLoadBalancing
from autodist.strategies.inputs import builder_variables
from autodist.strategies.picture import VARIABLES_SHOWN, plan_dot, plan_layout, plan_png
from autodist.strategies.report import plan_report

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _layout(item, spec, builder):
    report = plan_report(builder.build(item, spec), builder_variables(item), spec, repr(builder))
    return report, plan_layout(report, spec)


def _nodes(make_spec, k):
    return make_spec([("10.0.0.{}".format(i + 1), (), (0,)) for i in range(k)])


@pytest.fixture(scope="module")
def fifty_variables():
    """A captured graph of 50 dense variables of different sizes."""
    import tensorflow as tf
    from autodist.capture.graph_item import GraphItem
    from autodist.capture.optimizers import capture_optimizers
    graph = tf.Graph()
    with graph.as_default():
        item = GraphItem(graph)
        with capture_optimizers(), item.as_default():
            x = tf.compat.v1.placeholder(tf.float32, [None, 8])
            weights = [tf.compat.v1.get_variable("layer{}/kernel".format(i), initializer=tf.zeros([8, 8 * (1 + i % 7)]))
                       for i in range(50)]
            loss = tf.add_n([tf.reduce_sum(tf.matmul(x, w)) for w in weights])
            tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(loss)
        item.prepare()
    return item


def test_parameter_server_links_carry_a_push_and_a_pull_of_every_remote_piece(graph_item, make_spec):
    spec = _nodes(make_spec, 2)
    report, layout = _layout(graph_item, spec, PS())
    synchronized = sum(v.bytes for v in report.variables if v.synchronizer == "PS")
    assert layout.links == {("10.0.0.1:CPU:0", "10.0.0.2:CPU:0"): 2 * synchronized}
    assert layout.nodes == {"10.0.0.1": ["10.0.0.1:CPU:0"], "10.0.0.2": ["10.0.0.2:CPU:0"]}
    assert layout.roles["10.0.0.1:CPU:0"] == ("replica", "server")
    held = layout.variables["10.0.0.1:CPU:0"]
    assert [b for _, b in held] == sorted((b for _, b in held), reverse=True)
    assert "λ = {:.3f}".format(report.imbalance) in layout.title and layout.title.startswith("PS(")


def test_all_reduced_bytes_go_round_a_ring_of_the_replicas(graph_item, make_spec):
    spec = _nodes(make_spec, 3)
    report, layout = _layout(graph_item, spec, AllReduce())
    reduced = sum(v.bytes for v in report.variables if v.synchronizer == "AllReduce")
    ring = 2 * 2 / 3 * reduced
    assert layout.links == {("10.0.0.1:CPU:0", "10.0.0.2:CPU:0"): ring, ("10.0.0.2:CPU:0", "10.0.0.3:CPU:0"): ring,
                            ("10.0.0.1:CPU:0", "10.0.0.3:CPU:0"): ring}
    assert layout.variables == {}
    assert plan_layout(report, spec, predicted_step_s=0.0123).title.endswith("predicted step 12.3 ms")


def test_dot_has_a_cluster_per_node_and_a_labelled_edge_per_link(graph_item, make_spec):
    _, layout = _layout(graph_item, _nodes(make_spec, 2), PS())
    dot = plan_dot(layout)
    assert dot.startswith("graph plan {") and dot.rstrip().endswith("}")
    assert dot.count("subgraph cluster_") == 2
    assert dot.count(" -- ") == 1 and '"10.0.0.1:CPU:0" -- "10.0.0.2:CPU:0" [label=' in dot
    assert "W:0" in dot


@pytest.mark.parametrize("nodes", [2, 4])
def test_png_of_fifty_variables_is_written_and_lists_the_largest_on_each_server(fifty_variables, make_spec,
                                                                                 tmp_path, nodes):
    from matplotlib import image
    _, layout = _layout(fifty_variables, _nodes(make_spec, nodes), PSLoadBalancing())
    assert sum(len(v) for v in layout.variables.values()) == 50
    path = plan_png(layout, str(tmp_path / "plan.png"))
    data = (tmp_path / "plan.png").read_bytes()
    assert path == str(tmp_path / "plan.png") and data.startswith(PNG_MAGIC) and len(data) > 20000
    height, width = image.imread(path).shape[:2]
    assert 400 < width < 2000 and 300 < height < 2000
    # each server lists its VARIABLES_SHOWN largest pieces and counts the rest
    assert all(len(pieces) > VARIABLES_SHOWN for pieces in layout.variables.values())
    assert plan_dot(layout).count(" more, ") == nodes

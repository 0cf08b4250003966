"""autodist.graph_editor's public surface mirrors tf.contrib.graph_editor (TF 1.15)."""
import tensorflow as tf

import autodist.graph_editor as ge

R115_NAMES = {
    "util": ["make_list_of_op", "get_tensors", "make_list_of_t", "get_generating_ops",
             "get_consuming_ops", "ControlOutputs", "placeholder_name",
             "make_placeholder_from_tensor", "make_placeholder_from_dtype_and_shape"],
    "select": ["filter_ts", "filter_ts_from_regex", "filter_ops", "filter_ops_from_regex",
               "get_name_scope_ops", "check_cios", "get_ops_ios", "compute_boundary_ts",
               "get_within_boundary_ops", "get_forward_walk_ops", "get_backward_walk_ops",
               "get_walks_intersection_ops", "get_walks_union_ops", "select_ops", "select_ts",
               "select_ops_and_ts"],
    "subgraph": ["SubGraphView", "make_view", "make_view_from_scope"],
    "reroute": ["swap_ts", "reroute_ts", "swap_inputs", "reroute_inputs", "swap_outputs",
                "reroute_outputs", "swap_ios", "reroute_ios", "remove_control_inputs",
                "add_control_inputs"],
    "edit": ["detach_control_inputs", "detach_control_outputs", "detach_inputs",
             "detach_outputs", "detach", "connect", "bypass"],
    "transform": ["replace_t_with_placeholder_handler", "keep_t_if_possible_handler",
                  "assign_renamed_collections_handler", "transform_op_if_inside_handler",
                  "copy_op_handler", "Transformer", "copy", "copy_with_input_replacements",
                  "graph_replace"],
    "match": ["OpMatcher"],
}


def test_every_name_is_in_its_module_and_at_package_level():
    for module_name, names in R115_NAMES.items():
        module = getattr(ge, module_name)
        for name in names:
            assert name in module.__all__, (module_name, name)
            assert getattr(ge, name) is getattr(module, name), name
    assert set(ge.__all__) <= set(dir(ge))


def test_aliases():
    assert ge.ph is ge.util.make_placeholder_from_dtype_and_shape
    assert ge.sgv is ge.subgraph.make_view
    assert ge.sgv_scope is ge.subgraph.make_view_from_scope
    assert ge.reroute.reroute_ts is ge.reroute_ts


def test_import_toggles_nothing():
    assert tf.executing_eagerly()
    graph = tf.Graph()
    with graph.as_default():
        ph = ge.ph(tf.float32, [3])
    assert ph.graph is graph and ph.op.name == "geph"

"""A plan as a picture: nodes and devices as boxes, variables on their servers, links by bytes per step.

    report = plan_report(strategy, builder_variables(item), spec, repr(builder))
    layout = plan_layout(report, spec)
    open("plan.dot", "w").write(plan_dot(layout))     # Graphviz text: dot -Tsvg plan.dot
    plan_png(layout, "plan.png")                       # matplotlib, no Graphviz needed

``autodist plan --png FILE`` / ``--dot FILE`` call these. The links are the
report's traffic model (``autodist.strategies.report``) drawn per pair of
devices: a parameter-server piece of M bytes costs each replica a push and
a pull, ``2 M`` on the replica-server link; all-reduced variables go round
a ring of the replicas, ``2 (N - 1) / N * M`` on each link of the ring.
The title carries the builder, λ (max / mean bytes over the candidate
servers) and the bytes moved per step.
"""
import dataclasses
import math
import textwrap
from typing import Dict, List, Tuple

from autodist.errors import ArgumentError
from autodist.strategies.report import human_bytes, ring_all_reduce_bytes

__all__ = ["PlanLayout", "plan_layout", "plan_dot", "plan_png", "require_matplotlib", "VARIABLES_SHOWN"]

VARIABLES_SHOWN = 8    # variables listed in a server's box; the rest are counted


@dataclasses.dataclass
class PlanLayout:
    """What the picture shows, independent of how it is drawn."""

    title: str
    nodes: Dict[str, List[str]]                 # node address -> its devices, in spec order
    roles: Dict[str, Tuple[str, ...]]           # device -> ("replica", "server")
    held: Dict[str, int]                        # device -> bytes held
    variables: Dict[str, List[Tuple[str, int]]]  # server device -> [(variable or shard, bytes)], largest first
    links: Dict[Tuple[str, str], float]         # (device, device) -> bytes per step, both directions


def _node_of(device, spec_devices):
    spec = spec_devices.get(device)
    return spec.host_address if spec is not None else device.rsplit(":", 2)[0]


def _add(links, a, b, nbytes):
    if a != b and nbytes > 0:
        key = tuple(sorted((a, b)))
        links[key] = links.get(key, 0.0) + nbytes


def _links(report):
    links, all_reduced = {}, 0
    for row in report.variables:
        if row.synchronizer == "PS":
            for shard in row.shards:
                for replica in report.replicas:
                    _add(links, replica, shard.placement, 2 * shard.bytes)
        elif row.synchronizer == "AllReduce":
            all_reduced += row.bytes
    replicas = list(report.replicas)
    if len(replicas) > 1:
        ring = ring_all_reduce_bytes(all_reduced, len(replicas))
        for i, replica in enumerate(replicas):
            _add(links, replica, replicas[(i + 1) % len(replicas)], ring)   # two replicas: both ways on one link
    return links


def plan_layout(report, spec, predicted_step_s=None):
    """The :class:`PlanLayout` of a ``PlanReport`` on ``spec`` (``predicted_step_s`` joins the title)."""
    spec_devices = dict(spec.devices)
    nodes = {n.address: [] for n in spec.node_specs}
    for device in report.devices:
        nodes.setdefault(_node_of(device.device, spec_devices), []).append(device.device)
    variables = {}
    for row in report.variables:
        if row.synchronizer == "PS":
            for shard in row.shards:
                variables.setdefault(shard.placement, []).append((shard.name, shard.bytes))
    for pieces in variables.values():
        pieces.sort(key=lambda p: (-p[1], p[0]))
    links = _links(report)
    moved = sum(d.sent_bytes for d in report.devices)
    title = "{} on {} node{}, {} replicas: λ = {:.3f}, {} moved per step".format(
        report.builder or "plan " + report.strategy_id, len(nodes), "" if len(nodes) == 1 else "s",
        len(report.replicas), report.imbalance, human_bytes(moved))
    if predicted_step_s is not None:
        title += ", predicted step {:.1f} ms".format(predicted_step_s * 1e3)
    return PlanLayout(title=title, nodes={a: d for a, d in nodes.items() if d},
                      roles={d.device: d.roles for d in report.devices},
                      held={d.device: d.held_bytes for d in report.devices}, variables=variables, links=links)


def _device_lines(layout, device):
    """The text of a device's box: name, roles, bytes held, then its variables."""
    roles = "+".join(layout.roles.get(device, ())) or "-"
    lines = ["{}  ({})".format(device.rsplit(":", 2)[-2] + ":" + device.rsplit(":", 1)[-1], roles),
             "holds " + human_bytes(layout.held.get(device, 0))]
    pieces = layout.variables.get(device, [])
    for name, nbytes in pieces[:VARIABLES_SHOWN]:
        lines.append("{} {}".format(name if len(name) <= 28 else "…" + name[-27:], human_bytes(nbytes)))
    if len(pieces) > VARIABLES_SHOWN:
        rest = pieces[VARIABLES_SHOWN:]
        lines.append("+ {} more, {}".format(len(rest), human_bytes(sum(b for _, b in rest))))
    return lines


def _dot_id(name):
    return '"{}"'.format(name.replace("\\", "\\\\").replace('"', '\\"'))


def plan_dot(layout):
    """Graphviz text: one cluster per node, a box per device, edges labelled and weighted by bytes."""
    lines = ["graph plan {", "  label={}; labelloc=t; fontsize=16;".format(_dot_id(layout.title)),
             "  node [shape=box, fontname=monospace, fontsize=10];"]
    for index, (address, devices) in enumerate(layout.nodes.items()):
        lines.append("  subgraph cluster_{} {{ label={}; style=rounded;".format(index, _dot_id("node " + address)))
        for device in devices:
            label = "\\l".join(line.replace('"', "'") for line in _device_lines(layout, device)) + "\\l"
            lines.append('    {} [label="{}"];'.format(_dot_id(device), label))
        lines.append("  }")
    heaviest = max(layout.links.values(), default=1.0)
    for (a, b), nbytes in sorted(layout.links.items()):
        lines.append("  {} -- {} [label={}, penwidth={:.2f}];".format(
            _dot_id(a), _dot_id(b), _dot_id(human_bytes(nbytes)), 1 + 5 * nbytes / heaviest))
    lines.append("}")
    return "\n".join(lines) + "\n"


# -- the PNG --------------------------------------------------------------------------------
_COLUMN, _GAP, _LINE, _PAD, _FONT = 3.4, 2.2, 0.15, 0.12, 8   # inches (font: points)
_FILL = {("replica",): "#dbe9f6", ("server",): "#fde3c8", ("replica", "server"): "#dff0d8"}


def _boxes(layout):
    """``({device: (x, y, w, h)}, {address: (x, y, w, h)}, (width, height))`` in inches, y downwards.

    Nodes sit on a grid of ``ceil(sqrt(n))`` columns, so a link between two
    nodes crosses open space (two nodes: side by side; four: a square).
    """
    per_row = max(1, math.ceil(math.sqrt(len(layout.nodes))))
    devices, nodes, row_top, row_height = {}, {}, 0.0, 0.0
    for index, (address, names) in enumerate(layout.nodes.items()):
        column = index % per_row
        if column == 0 and index:
            row_top, row_height = row_top + row_height + _GAP * 0.7, 0.0
        x, y = column * (_COLUMN + _GAP), row_top + 0.45
        for device in names:
            h = len(_device_lines(layout, device)) * _LINE + 2 * _PAD
            devices[device] = (x + 0.2, y, _COLUMN - 0.4, h)
            y += h + 0.45
        nodes[address] = (x, row_top, _COLUMN, y - row_top - 0.2)
        row_height = max(row_height, y - row_top)
    columns = min(len(layout.nodes), per_row)
    return devices, nodes, (columns * _COLUMN + (columns - 1) * _GAP, row_top + row_height)


def _clip(box, inside, outside):
    """The point where the segment from ``inside`` (the box's centre) to ``outside`` leaves ``box``."""
    x, y, w, h = box
    dx, dy = outside[0] - inside[0], outside[1] - inside[1]
    scale = min(w / 2 / abs(dx) if dx else math.inf, h / 2 / abs(dy) if dy else math.inf, 1.0)
    return inside[0] + dx * scale, inside[1] + dy * scale


def _centre(box):
    return box[0] + box[2] / 2, box[1] + box[3] / 2


def _draw_links(axes, layout, devices):
    heaviest = max(layout.links.values(), default=1.0)
    for (a, b), nbytes in sorted(layout.links.items(), key=lambda item: item[1]):
        ca, cb = _centre(devices[a]), _centre(devices[b])
        start, end = _clip(devices[a], ca, cb), _clip(devices[b], cb, ca)
        push_pull = "server" in layout.roles.get(a, ()) + layout.roles.get(b, ())
        color = "#1f77b4" if push_pull else "#d62728"
        axes.plot([start[0], end[0]], [start[1], end[1]], color=color, alpha=0.55, solid_capstyle="butt",
                  linewidth=0.8 + 5 * nbytes / heaviest, zorder=1)
        t = 0.35   # off the middle, so crossing links (a square's diagonals) keep their labels apart
        axes.text(start[0] + t * (end[0] - start[0]), start[1] + t * (end[1] - start[1]), human_bytes(nbytes),
                  fontsize=_FONT - 0.5, ha="center", va="center", color=color, zorder=4,
                  bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="none", alpha=0.9))


def require_matplotlib(what="autodist plan --png"):
    """The ``matplotlib`` module; ``ArgumentError`` saying which extra installs it when it is missing."""
    try:
        import matplotlib
    except ImportError as e:
        raise ArgumentError("{} draws with matplotlib, which is not installed ({}); install it with "
                            "pip install \"autodist[examples]\" (or pip install matplotlib), or use --dot FILE, "
                            "which needs nothing more".format(what, e)) from None
    return matplotlib


def plan_png(layout, path, dpi=110):
    """Draw ``layout`` with matplotlib into the PNG ``path``; returns the path."""
    matplotlib = require_matplotlib()
    matplotlib.use("Agg")
    from matplotlib import patches, pyplot
    devices, nodes, (width, height) = _boxes(layout)
    figure = pyplot.figure(figsize=(max(width, 7.0) + 0.6, height + 1.4))
    axes = figure.add_axes([0, 0, 1, 1])
    axes.set_xlim(-0.3, max(width, 7.0) + 0.3)
    axes.set_ylim(height + 0.6, -0.8)
    axes.axis("off")
    axes.text(max(width, 7.0) / 2, -0.5, "\n".join(textwrap.wrap(layout.title, 110)), ha="center", va="center",
              fontsize=10, weight="bold")
    for address, (x, y, w, h) in nodes.items():
        axes.add_patch(patches.FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.02,rounding_size=0.15",
                                              fc="#f6f6f6", ec="#888888", zorder=0))
        axes.text(x + 0.15, y + 0.22, "node " + address, fontsize=_FONT + 1.5, weight="bold", va="center", zorder=3)
    for device, (x, y, w, h) in devices.items():
        axes.add_patch(patches.Rectangle((x, y), w, h, fc=_FILL.get(layout.roles.get(device, ()), "white"),
                                         ec="#444444", zorder=2))
        axes.text(x + 0.1, y + _PAD, "\n".join(_device_lines(layout, device)), fontsize=_FONT, family="monospace",
                  va="top", ha="left", zorder=3, linespacing=_LINE * 72 / _FONT)
    _draw_links(axes, layout, devices)
    axes.plot([], [], color="#1f77b4", lw=3, label="push + pull (parameter server), bytes per step")
    axes.plot([], [], color="#d62728", lw=3, label="all-reduce ring, bytes per step")
    axes.legend(loc="lower right", fontsize=_FONT - 1, frameon=False)
    figure.savefig(path, dpi=dpi)
    pyplot.close(figure)
    return path

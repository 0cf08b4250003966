"""Address syntax and the cross-field rules of a resource spec.

The schema (``autodist.spec.schema``) checks each value on its own; the rules
here need several values at once and run on the schema's normalized output.
They report at the line of the offending key, found again in the located tree
(``autodist.spec.yaml_tree``), so every message still reads
``<file>:<line>: <key path>: <problem>``.

Rules, in the order they are checked:
  1. addresses are unique (compared canonically: ``::1`` == ``0:0::1``,
     hostnames case-insensitively); distinct loopback addresses are fine;
  2. with more than one node, exactly one has ``chief: true``;
  3. every ``ssh_config`` names a group under ``ssh``;
  4. a non-chief node whose address is not loopback has an ``ssh_config``
     (it can only be reached over SSH);
  5. loopback and non-loopback addresses are not mixed: a 127.0.0.x server is
     reachable only from its own machine, so such a cluster would hang at start;
  6. the node template's ``ssh_config`` names a group under ``ssh`` (the nodes
     made from it are checked by these rules when they are made).
"""
import difflib
import ipaddress
import os
import re

__all__ = ["address_problem", "canonical_address", "is_loopback", "did_you_mean", "check_rules", "task_order",
           "spec_warnings"]

_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)\Z")
# Characters no address, hostname or network (10.0.0.0/8) contains: shell syntax such as ';', '$(', '${IFS}'.
_NOT_IN_ADDRESSES = re.compile(r"[^A-Za-z0-9.:/%_-]")
# Shell syntax in python_venv: it runs as written (a prefix such as `source ~/venv/bin/activate &&`).
_SHELL_SYNTAX = re.compile(r"[;|&`$<>()\n\\]")


def _ip(address):
    try:
        return ipaddress.ip_address(address)
    except ValueError:
        return None


def address_problem(address):
    """Why ``address`` is not an IPv4/IPv6 address or RFC 1123 hostname, or None if it is one."""
    if not address:
        return "must not be empty"
    if any(ch.isspace() for ch in address):
        return "an address cannot contain whitespace"
    if _ip(address) is not None:
        return None
    odd = sorted(set(_NOT_IN_ADDRESSES.findall(address)))
    if odd:
        return ("not a valid IPv4/IPv6 address or hostname: {!r} contains {} (addresses use digits, '.' and "
                "':'; hostnames letters, digits, '-' and '.')".format(address, " ".join(repr(c) for c in odd)))
    if "/" in address:
        return "expected a single address, got a network ({!r})".format(address)
    if ":" in address:
        host, _, port = address.rpartition(":")
        if port.isdigit() and ":" not in host and host:
            return ("an address carries no port ({!r}); the SSH port goes in the node's ssh "
                    "group".format(address))
        return "not a valid IPv6 address: {!r}".format(address)
    labels = address.split(".")
    if all(label.isdigit() for label in labels):
        return "not a valid IPv4 address: {!r}".format(address)
    if len(address) > 253 or not all(_LABEL.match(label) for label in labels):
        return ("not a valid IPv4/IPv6 address or hostname: {!r} (hostnames use letters, digits "
                "and '-', in dot-separated labels of 1-63 characters)".format(address))
    return None


def canonical_address(address):
    """The form two spellings of one address share (compressed IP, lower-case hostname)."""
    ip = _ip(address)
    return ip.compressed if ip is not None else address.lower()


def is_loopback(address):
    """True for 127.0.0.0/8, ::1 (also IPv4-mapped) and the hostname 'localhost'."""
    ip = _ip(address)
    if ip is None:
        return address.lower() == "localhost"
    mapped = getattr(ip, "ipv4_mapped", None)
    return ip.is_loopback or (mapped is not None and mapped.is_loopback)


def task_order(addresses):
    """Node addresses in TensorFlow task order: sorted as strings, so every process agrees.

    The order is textual (``10.0.0.10`` before ``10.0.0.9``). The resource
    spec (device names) and the job context (server tasks) both use this.
    """
    return sorted(addresses)


def did_you_mean(name, choices):
    """The choice closest to ``name`` (case-insensitive), or None when nothing is close."""
    if not isinstance(name, str):
        return None
    lowered = {choice.lower(): choice for choice in choices}
    close = difflib.get_close_matches(name.lower(), list(lowered), n=1, cutoff=0.6)
    return lowered[close[0]] if close else None


def _line(tree, *steps):
    """The line of the key (or list item) that ``steps`` lead to in the located tree.

    Stops at the deepest step present, so a key filled from a default is reported
    at its enclosing mapping.
    """
    node, line = tree, tree.line
    for step in steps:
        if node.kind == "seq" and isinstance(step, int) and step < len(node.value):
            node = node.value[step]
            line = node.line
        elif node.kind == "map":
            entry = next((e for e in node.value if e.key == step), None)
            if entry is None:
                return line
            node, line = entry.node, entry.line
        else:
            return line
    return line


def check_rules(doc, tree, ctx):
    """Run the cross-field rules on checked data; return the index of the chief node."""
    nodes = doc["nodes"]
    _unique_addresses(nodes, tree, ctx)
    chief = _one_chief(nodes, tree, ctx)
    _ssh_references(nodes, doc["ssh"], chief, tree, ctx, doc.get("started_by", "chief") == "platform")
    _not_mixed(nodes, chief, tree, ctx)
    template = doc.get("node_template")
    if template is not None and template["ssh_config"] is not None and template["ssh_config"] not in doc["ssh"]:
        raise ctx.error("no ssh group named {!r} (groups: {})".format(template["ssh_config"], ", ".join(
            sorted(doc["ssh"])) or "none"), _line(tree, "node_template", "ssh_config"), "node_template.ssh_config")
    return chief


def _unique_addresses(nodes, tree, ctx):
    first = {}
    for i, node in enumerate(nodes):
        canonical = canonical_address(node["address"])
        if canonical in first:
            j = first[canonical]
            problem = ("duplicate address {!r} (already used by nodes[{}]{}); every node needs its "
                       "own address (use 127.0.0.1, 127.0.0.2, ... for local nodes)").format(
                           node["address"], j, _on_line(tree, "nodes", j, "address"))
            raise ctx.error(problem, _line(tree, "nodes", i, "address"),
                            "nodes[{}].address".format(i))
        first[canonical] = i


def _on_line(tree, *steps):
    line = _line(tree, *steps)
    return "" if line is None else " on line {}".format(line)


def _one_chief(nodes, tree, ctx):
    chiefs = [i for i, node in enumerate(nodes) if node["chief"]]
    if len(nodes) == 1:
        return 0
    if not chiefs:
        raise ctx.error("none of the {} nodes has 'chief: true'; mark exactly one (the machine "
                        "that runs your script)".format(len(nodes)), _line(tree, "nodes"), "nodes")
    if len(chiefs) > 1:
        second = chiefs[1]
        raise ctx.error("several chiefs: nodes[{}]{} is already the chief; keep 'chief: true' on "
                        "exactly one node".format(chiefs[0], _on_line(tree, "nodes", chiefs[0])),
                        _line(tree, "nodes", second, "chief"), "nodes[{}].chief".format(second))
    return chiefs[0]


def _ssh_references(nodes, groups, chief, tree, ctx, joined=False):
    """Every ssh group named exists; every node the chief launches over SSH names one (``joined``: the
    platform starts every process, nobody is reached over SSH)."""
    for i, node in enumerate(nodes):
        name = node["ssh_config"]
        key = "nodes[{}].ssh_config".format(i)
        if name is not None and name not in groups:
            close = did_you_mean(name, groups)
            if close:
                hint = "did you mean {!r}?".format(close)
            elif groups:
                hint = "groups: {}".format(", ".join(sorted(groups)))
            else:
                hint = "the spec has no 'ssh' section"
            raise ctx.error("no ssh group named {!r} ({})".format(name, hint),
                            _line(tree, "nodes", i, "ssh_config"), key)
        if name is None and i != chief and not is_loopback(node["address"]) and not joined:
            raise ctx.error("missing: node {!r} is neither the chief nor a loopback address, so it "
                            "is reached over SSH; name a group under 'ssh'".format(node["address"]),
                            _line(tree, "nodes", i), key)


def _not_mixed(nodes, chief, tree, ctx):
    chief_loopback = is_loopback(nodes[chief]["address"])
    for i, node in enumerate(nodes):
        if is_loopback(node["address"]) != chief_loopback:
            loopback, other = (nodes[chief], node) if chief_loopback else (node, nodes[chief])
            problem = ("loopback address {!r} mixed with non-loopback address {!r}: a loopback "
                       "address is reachable only from its own machine, so use all-loopback "
                       "addresses (one machine) or none").format(loopback["address"],
                                                                 other["address"])
            raise ctx.error(problem, _line(tree, "nodes", i, "address"),
                            "nodes[{}].address".format(i))


def spec_warnings(doc, tree, ctx):
    """Problems a valid spec may still have at launch, as ``<file>:<line>: <key>: <problem>`` strings.

    They are not errors: the key file is read on the machine that launches the
    job (maybe not this one), and ``python_venv`` is a shell prefix by design.
    """
    for name, group in doc["ssh"].items():
        key_file = group["key_file"]
        if key_file is not None and not os.path.isfile(key_file):
            yield str(ctx.error("{} does not exist on this machine; it must exist on the machine that launches "
                                "the job (the chief)".format(key_file), _line(tree, "ssh", name, "key_file"),
                                "ssh.{}.key_file".format(name)))
        venv = group["python_venv"]
        if _SHELL_SYNTAX.search(venv):
            yield str(ctx.error("{!r} contains shell syntax; it runs as written in the node's shell before python "
                                "(by design), so keep it to commands you trust".format(venv),
                                _line(tree, "ssh", name, "python_venv"), "ssh.{}.python_venv".format(name)))

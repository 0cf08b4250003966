"""Shrinking past a lost node: at a relaunch, leave out the nodes that fail preflight (``--min-nodes K``).

    attempt 2 of a supervised job (``runtime.recovery.restart``), min_nodes=1
        preflight every other node (runner.preflight)    127.0.0.2: cannot connect ...
        at least K nodes pass?   yes -> the spec without the failed ones:
            [autodist] attempt 2: leaving out 127.0.0.2 (...): 1 of 2 nodes remain (min_nodes 1)
        no  -> PreflightError naming every failed node: the attempt ends, and so does the job
    Job._start, once the strategy is built for the nodes left
            [autodist] plan change: nodes 127.0.0.1, 127.0.0.2 -> 127.0.0.1; builder AllReduce; replicas 2 -> 1

Only a relaunch shrinks: a first launch with an unfit node fails as always,
so a typo in a spec never silently trains on fewer nodes. The strategy is
rebuilt by the same builder for the smaller spec, and the script, started
anew, sees the smaller ``num_workers`` and splits its global batch over it;
the checkpoint it resumes from is in the single-device layout, which any
strategy on any number of nodes restores (``autodist.checkpoint``).

Nodes launched by the chief learn which nodes remain from their job context
(``restricted``): every process of the job sees the same, smaller, spec.
"""
from autodist.errors import PreflightError

__all__ = ["leave_out_unreachable", "restricted", "plan_change"]


def restricted(spec, addresses):
    """``spec`` with only the nodes at ``addresses`` (and the SSH groups they use); ``spec`` when all remain."""
    from autodist.spec.resource_spec import ResourceSpec
    keep = set(addresses)
    if keep >= {n.address for n in spec.node_specs}:
        return spec
    data = spec.to_dict()
    data["nodes"] = [n for n in data["nodes"] if n["address"] in keep]
    used = {n.get("ssh_config") for n in data["nodes"]}
    if "ssh" in data:
        data["ssh"] = {name: group for name, group in data["ssh"].items() if name in used}
        if not data["ssh"]:
            del data["ssh"]
    return ResourceSpec.from_dict(data, path=spec.path)


def _unfit_nodes(spec, timeout, python, runner_factory):
    """``{address: problem}`` of the other nodes that fail preflight (loopback nodes have none to fail)."""
    from autodist.runner import LocalRunner
    from autodist.runner.preflight import local_versions, preflight
    runners = [runner_factory(n, spec) for n in spec.node_specs if n.address != spec.chief]
    remote = [r for r in runners if not isinstance(r, LocalRunner)]
    try:
        if remote:
            preflight(remote, local_versions(), timeout=timeout, python=python)
    except PreflightError as e:
        return e.failures
    finally:
        for runner in runners:
            runner.close()
    return {}


def leave_out_unreachable(spec, min_nodes, say, timeout=60.0, python="python3", runner_factory=None):
    """``(spec without the nodes that fail preflight, {address: problem})``, keeping at least ``min_nodes``.

    Raises ``PreflightError`` naming every failed node when fewer would remain.
    """
    if runner_factory is None:
        from autodist.runtime.launch.node import default_runner as runner_factory
    failures = _unfit_nodes(spec, timeout, python, runner_factory)
    if not failures:
        return spec, {}
    remaining = [n.address for n in spec.node_specs if n.address not in failures]
    if len(remaining) < min_nodes:
        failures = dict(failures, **{"(min_nodes)": "only {} of {} node(s) pass, {} needed".format(
            len(remaining), len(spec.node_specs), min_nodes)})
        raise PreflightError(failures)
    say("leaving out {}: {} of {} nodes remain (min_nodes {})".format(
        "; ".join("{} ({})".format(a, p.splitlines()[0]) for a, p in sorted(failures.items())),
        len(remaining), len(spec.node_specs), min_nodes))
    return restricted(spec, remaining), failures


def plan_change(before, after, builder, replicas_before, replicas_after):
    """The line saying how the job shrank: nodes, builder, replicas."""
    return "plan change: nodes {} -> {}; builder {}; replicas {} -> {}".format(
        ", ".join(n.address for n in before.node_specs), ", ".join(n.address for n in after.node_specs),
        type(builder).__name__, replicas_before, replicas_after)

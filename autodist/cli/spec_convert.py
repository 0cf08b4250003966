"""``autodist spec from-tf-config`` and ``autodist spec from-slurm``: write a resource spec.

    autodist spec from-tf-config [--tf-config JSON] [--gpus-per-node N] [--include-ps] [ssh options] [-o FILE]
    autodist spec from-slurm [--gpus-per-node N] [ssh options] [-o FILE]

The first reads the ``TF_CONFIG`` environment variable that Kubernetes
training operators set (or ``--tf-config``), the second the node list and GPU
variables of the current Slurm allocation (``autodist.spec.convert`` has the
rules). The spec is checked like ``autodist spec validate`` before it is
written; the other nodes are reached through one ssh group, ``cluster``,
made of the ssh options (the user defaults to the current one).
"""
import getpass
import os
import sys

import yaml

from autodist.cli.common import count
from autodist.cli.spec import spec_actions, summary
from autodist.spec.convert import spec_from_slurm, spec_from_tf_config
from autodist.spec.resource_spec import ResourceSpec

__all__ = ["register", "ssh_group", "render"]


def _common_options(parser, gpus_default):
    parser.add_argument("--gpus-per-node", type=count, default=gpus_default, metavar="N",
                        help="GPUs of every node (numbered 0..N-1)")
    ssh = parser.add_argument_group("ssh group 'cluster' (how the chief reaches the other nodes)")
    ssh.add_argument("--ssh-username", metavar="USER", help="login user (default: the current user)")
    ssh.add_argument("--ssh-port", type=count, default=22, metavar="PORT", help="sshd port (default: 22)")
    ssh.add_argument("--ssh-key-file", metavar="FILE", help="private key file (default: ssh-agent/default keys)")
    ssh.add_argument("--python-venv", metavar="PREFIX", default="",
                     help="shell prefix run before python on the nodes, e.g. 'source ~/venv/bin/activate'")
    ssh.add_argument("--known-hosts-file", metavar="FILE", help="known_hosts to verify host keys against")
    ssh.add_argument("--accept-new-host-keys", action="store_true",
                     help="record the keys of hosts not in known_hosts instead of refusing them")
    parser.add_argument("-o", "--output", metavar="FILE", help="write the spec here (default: stdout)")


def register(subparsers):
    actions = spec_actions(subparsers)
    from_tf = actions.add_parser(
        "from-tf-config", help="write a resource spec from TF_CONFIG (Kubernetes training operators)",
        description="Write a resource spec for the cluster in TF_CONFIG: the chief task (or worker 0) "
                    "is the chief, every worker host a node; evaluators are left out.")
    from_tf.add_argument("--tf-config", metavar="JSON", help="the TF_CONFIG text (default: $TF_CONFIG)")
    from_tf.add_argument("--include-ps", action="store_true",
                         help="make the parameter-server hosts CPU-only nodes too (default: left out)")
    _common_options(from_tf, 0)
    from_tf.set_defaults(handler=_from_tf_config)
    from_slurm = actions.add_parser(
        "from-slurm", help="write a resource spec for the current Slurm allocation",
        description="Write a resource spec from SLURM_JOB_NODELIST (the chief: this node, SLURMD_NODENAME, "
                    "else the first host), SLURM_JOB_CPUS_PER_NODE (each node's threads) and the GPU variables "
                    "SLURM_GPUS_ON_NODE, SLURM_JOB_GPUS, SLURM_GPUS_PER_NODE or CUDA_VISIBLE_DEVICES.")
    _common_options(from_slurm, None)
    from_slurm.set_defaults(handler=_from_slurm)


def ssh_group(args):
    """The ``cluster`` ssh group's fields from the command-line options."""
    group = {"username": args.ssh_username or getpass.getuser(), "port": args.ssh_port,
             "python_venv": args.python_venv, "accept_new_host_keys": bool(args.accept_new_host_keys)}
    if args.ssh_key_file:
        group["key_file"] = args.ssh_key_file
    if args.known_hosts_file:
        group["known_hosts_file"] = args.known_hosts_file
    return group


def render(data, origin):
    """YAML text of spec ``data`` with a header naming where it came from."""
    return "# Written by `autodist spec {}`; check it with `autodist spec validate`.\n{}".format(
        origin, yaml.safe_dump(data, sort_keys=False, default_flow_style=None))


def _write(data, origin, output):
    spec = ResourceSpec.from_dict(data, path=output or "<{}>".format(origin))
    text = render(data, origin)
    if output:
        with open(output, "w", encoding="utf-8") as f:
            f.write(text)
        print(summary(spec))
    else:
        sys.stdout.write(text)
    return 0


def _from_tf_config(args):
    text = args.tf_config if args.tf_config is not None else os.environ.get("TF_CONFIG")
    source = "--tf-config" if args.tf_config is not None else "TF_CONFIG"
    data = spec_from_tf_config(text, gpus_per_node=args.gpus_per_node, ssh=ssh_group(args),
                               include_ps=args.include_ps, source=source)
    return _write(data, "from-tf-config", args.output)


def _from_slurm(args):
    data = spec_from_slurm(os.environ, ssh=ssh_group(args), gpus_per_node=args.gpus_per_node)
    return _write(data, "from-slurm", args.output)

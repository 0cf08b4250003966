"""``autodist cluster``: an emulated cluster of separate hosts on this machine (root only).

    autodist cluster up -n 3 [--rate 1gbit] [--name NAME] [--cores 0 1] [--threads 1] [--slurm] [--mpi] -o cluster.yml
    autodist cluster exec [--name NAME] 0 -- python train.py          # the chief runs in node 0
    autodist cluster link [--name NAME] 2 down | up | rate 100mbit    # while a job runs
    autodist cluster down [--name NAME]

What it makes and how: ``autodist.runner.cluster`` (and docs/cluster.md).
"""
import argparse
import os
import sys

from autodist.cli.common import command_group

__all__ = ["register"]

_HELP = "an emulated cluster of separate hosts on this machine (network namespaces; root only)"


def _cores(text):
    """One node's cores: ``0`` or ``0,1``."""
    parts = text.split(",")
    if not all(p.strip().isdigit() for p in parts):
        raise argparse.ArgumentTypeError("expected core numbers separated by commas, e.g. 0 or 0,1; got {!r}".format(
            text))
    return tuple(int(p) for p in parts)


def _name(parser):
    parser.add_argument("--name", default=None, help="the cluster's name (default: local)")


def register(subparsers):
    actions = command_group(subparsers, "cluster", _HELP)
    up = actions.add_parser("up", help="make N namespaces on a bridge, an sshd in each, and a resource spec",
                            description="Make an emulated cluster: N network namespaces joined by a bridge, each "
                                        "node's link shaped both ways at --rate, an sshd in every node and a "
                                        "resource spec that reaches the other nodes over SSH (node 0 is the chief).")
    up.add_argument("-n", "--nodes", type=int, required=True, help="number of nodes")
    up.add_argument("--rate", default="1gbit", help="every link's rate each way, tc notation (default 1gbit)")
    _name(up)
    up.add_argument("--cores", type=_cores, nargs="+", metavar="CORES",
                    help="CPU cores per node for the spec's `cores` (node i takes the i-th, round robin): "
                         "--cores 0 1 pins node 0 to core 0 and node 1 to core 1")
    up.add_argument("--threads", type=int, default=0, help="the spec's `threads` per node (default 0: TensorFlow's)")
    up.add_argument("--slurm", action="store_true",
                    help="also a real Slurm cluster: munged and slurmctld in node 0, a slurmd in every node "
                         "(slurm-wlm and munge installed); `exec` sets SLURM_CONF for sbatch and srun")
    up.add_argument("--mpi", action="store_true",
                    help="also Open MPI's hostfile and parameters: mpirun in node 0 reaches every node over its "
                         "sshd (openmpi-bin installed); `exec` sets OMPI_MCA_mca_param_files")
    up.add_argument("-o", "--output", required=True, metavar="SPEC.yml", help="the resource spec to write (new file)")
    up.set_defaults(handler=_up)
    run = actions.add_parser("exec", help="run a command inside a node's namespace",
                             description="Run CMD inside NODE's network namespace (an index, an address or a "
                                         "namespace name); the chief's script runs in node 0.")
    _name(run)
    run.add_argument("node", metavar="NODE")
    run.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD ...")
    run.set_defaults(handler=_exec)
    link = actions.add_parser("link", help="cut, restore or reshape one node's link",
                              description="Cut (down), restore (up) or reshape (rate RATE) NODE's link at the "
                                          "switch, for example while a job runs.")
    _name(link)
    link.add_argument("node", metavar="NODE")
    link.add_argument("action", choices=("down", "up", "rate"))
    link.add_argument("rate", nargs="?", metavar="RATE", help="with `rate`: the new rate each way, e.g. 100mbit")
    link.set_defaults(handler=_link)
    down = actions.add_parser("down", help="remove everything the cluster made",
                              description="Stop the cluster's sshds and every process left in its namespaces, "
                                          "remove the namespaces (links, bridge, rate limits), its spec and files.")
    _name(down)
    down.set_defaults(handler=_down)


def _names(args):
    from autodist.runner.cluster import DEFAULT_NAME, ClusterNames
    return ClusterNames(DEFAULT_NAME if args.name is None else args.name)   # "" is refused, not the default


def _say(line):
    """Print a line of what the command did; a reader that went away (``up ... | head``) does not undo it."""
    try:
        print(line, flush=True)
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)   # the rest goes nowhere, also Python's flush at exit
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def _up(args):
    from autodist.runner.cluster import parse_rate, up
    rate = parse_rate(args.rate)
    up(_names(args), args.nodes, rate, args.output, cores=args.cores or (), threads=args.threads,
       say=_say, slurm=args.slurm, mpi=args.mpi)
    return 0


def _command(args):
    """The command after NODE, and ``--name`` when it was given there (``exec 0 --name b -- cmd``)."""
    from autodist.errors import ArgumentError
    words = list(args.command)
    if "--" in words:
        options, command = words[:words.index("--")], words[words.index("--") + 1:]
    else:
        options, command = [], words
    if (options[:1] == ["--name"] and len(options) == 2) or (len(options) == 1 and options[0].startswith("--name=")):
        name = options[1] if len(options) == 2 else options[0].partition("=")[2]
        if args.name is not None and args.name != name:
            raise ArgumentError("autodist cluster exec: two cluster names, --name {} and --name {}; give one".format(
                args.name, name))
        args.name, options = name, []
    if options or command[:1] and command[0].startswith("-"):
        raise ArgumentError("autodist cluster exec: {!r} before the command: options go before NODE and the command "
                            "after --, e.g. autodist cluster exec --name NAME 0 -- python train.py".format(
                                " ".join(options or command[:1])))
    return command


def _exec(args):
    from autodist.runner.cluster import exec_argv
    command = _command(args)
    argv = exec_argv(_names(args), args.node, command)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvp(argv[0], argv)   # the command's exit status and signals are the caller's, as with `ip netns exec`


def _link(args):
    from autodist.errors import ArgumentError
    from autodist.runner.cluster import link
    if (args.action == "rate") != (args.rate is not None):
        raise ArgumentError("autodist cluster link NODE rate RATE takes a rate (e.g. 100mbit); down and up take none")
    _say(link(_names(args), args.node, args.action, args.rate))
    return 0


def _down(args):
    from autodist.runner.cluster import down
    down(_names(args), say=_say)
    return 0

"""``autodist run``: train an unmodified tf.compat.v1 script on every node of a resource spec.

    autodist run [-r SPEC] [--launcher {ssh,srun}] [-s BUILDER] [--arg key=value ...] [--trace-dir DIR] [--logdir DIR]
                 [--verbose] [--steps N] [--no-progress] [--stall-timeout S]
                 [--max-restarts N [--restart-backoff S] [--min-nodes K]]
                 [--checkpoint-dir DIR [--checkpoint-steps N] [--checkpoint-secs T]] SCRIPT [script args ...]

The script runs in this process (the chief) with its sessions distributed
(``autodist.runtime.autorun.run``); the other nodes run ``python -m autodist run`` with
the same options, script and arguments, from the same working directory, and
join the job. Builder names and ``--arg`` values are those of
``autodist plan``. The exit status is the script's; 1 when another node of
the job failed (the error names the host, its exit code and its last log
lines); 130 after Ctrl-C, once every process of the job is stopped. With
``--max-restarts N`` this process supervises up to N+1 attempts, each a chief
of a new job (``autodist.runtime.recovery.restart``); with ``--min-nodes K`` a restart
leaves out the nodes that fail preflight while K remain (``autodist.runtime.recovery.shrink``).
``--checkpoint-dir`` makes the job save as it trains and a new run of the
command resume at the saved step, for any script
(``autodist.runtime.autorun.checkpoints``; removed when the job succeeds).
``--trace-dir`` and ``--logdir`` are AutoDist's ``trace_dir`` and ``logdir``
(the timeline and TensorBoard scalars, ``docs/observability.md``). The
elastic options (``--host-discovery-script``, ``--elastic``, ``--max-nodes``...)
make this process the elastic supervisor (``autodist.runtime.elastic``,
``docs/elastic.md``); ``--uneven-inputs`` and ``--auto-shard`` reach every
node (``autodist.cli.run_options``).

Inside a Slurm allocation (``SLURM_JOB_NODELIST`` set) the other nodes are
started with ``srun`` (``--launcher srun``, the default there; ``docs/slurm.md``)
and ``-r`` may be left out: the spec is then the allocation's
(``autodist.spec.convert.spec_from_slurm``, this node the chief), and it
reaches the other nodes on their command line (``--spec-json``).

The console shows what the script prints on every node (the other nodes'
lines prefixed ``[address]``) and a progress line on the chief (``--steps``:
the script's step count, for an ETA); TensorFlow's start-up chatter and
autodist's internal lines only with ``--verbose``. Every launched process's
full output stays in ``~/.autodist/logs/job-<id>/`` (``autodist.runtime.launch.job_logs``).

Options out of their range (``--steps 0``, ``--stall-timeout 1e-9``,
``--restart-backoff inf``, ``--min-nodes`` beyond the spec's nodes or without
``--max-restarts``) exit with status 2 before anything runs
(``autodist.runtime.limits``).
"""
import argparse
import getpass
import json
import os
import sys

from autodist.cli.common import EXIT_INTERRUPTED, checked, count
from autodist.cli.plan import builder_from_args, require_file
from autodist.cli.run_options import (add_checkpoint_options, add_elastic_options, add_input_options,
                                      check_checkpoint_options, checkpoint_schedule, elastic_of, input_argv)
from autodist.errors import RemoteWorkerError, ResourceSpecError
from autodist.runtime.limits import (MAX_SECONDS, MIN_STALL_TIMEOUT, accumulation_steps, check_min_nodes,
                                     restart_backoff, stall_timeout, whole)
from autodist.runtime.recovery.restart import ATTEMPT_ENV, NODE_FAILED, supervise
from autodist.runtime.watch.stall import DEFAULT_STALL_TIMEOUT
from autodist.runtime.elastic import supervise_elastic

__all__ = ["register", "worker_argv", "resource_spec_of"]

EXIT_REMOTE_FAILURE = 1


def register(subparsers):
    parser = subparsers.add_parser(
        "run", help="train an unmodified tf.compat.v1 script on every node of a resource spec",
        description="Run a tf.compat.v1 training script (graph built in the default graph, trained with "
                    "tf.compat.v1.Session or MonitoredTrainingSession) data-parallel across the resource "
                    "spec's nodes, without changing it. See docs/running.md.")
    parser.add_argument("-r", "--resource-spec", metavar="SPEC",
                        help="resource spec (YAML); inside a Slurm allocation the default is the allocation's "
                             "(see `autodist spec from-slurm`)")
    parser.add_argument("--spec-json", help=argparse.SUPPRESS)   # the chief's derived spec, for the other nodes
    parser.add_argument("--launcher", choices=("ssh", "srun"),
                        help="how the other nodes are started: ssh, or srun (job steps of the current Slurm "
                             "allocation); default: srun when SLURM_JOB_NODELIST is set, else ssh")
    parser.add_argument("-s", "--strategy", metavar="BUILDER",
                        help="strategy builder (default: PSLoadBalancing); see `autodist plan --help`")
    parser.add_argument("--arg", dest="builder_args", action="append", default=[], metavar="KEY=VALUE",
                        help="builder constructor argument (repeatable)")
    parser.add_argument("--accumulation-steps", type=checked(accumulation_steps, int), metavar="K",
                        help="accumulate gradients over K calls of a train op, synchronize and apply once "
                             "(docs/large_batches.md)")
    parser.add_argument("--trace-dir", metavar="DIR", help="trace a few steps on every node into DIR/timeline.json")
    parser.add_argument("--logdir", metavar="DIR", help="write TensorBoard scalars per node into DIR")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="show everything every node prints, TensorFlow's start-up messages included")
    parser.add_argument("--steps", type=checked(whole, int), metavar="N",
                        help="the number of session calls the script makes, for the progress line's ETA")
    parser.add_argument("--no-progress", dest="progress", action="store_false",
                        help="no progress line on the chief")
    parser.add_argument("--stall-timeout", type=checked(stall_timeout), default=DEFAULT_STALL_TIMEOUT,
                        metavar="S", help="a step without progress for S seconds ends the job with a report of the "
                                          "nodes that held it up ({:g} to {:g}; default: %(default).0f)".format(
                                              MIN_STALL_TIMEOUT, MAX_SECONDS))
    parser.add_argument("--max-restarts", type=count, default=0, metavar="N",
                        help="after a node failure (a script or server exits, a connection drops, a stall) start "
                             "a new job up to N times; a script that saves checkpoints resumes from its newest "
                             "(MonitoredTrainingSession(checkpoint_dir=...)). Default 0")
    parser.add_argument("--restart-backoff", type=checked(restart_backoff), default=2.0, metavar="S",
                        help="seconds between a failed attempt and the next (0 to {:g}; default: %(default).0f)"
                             .format(MAX_SECONDS))
    parser.add_argument("--min-nodes", type=checked(whole, int), default=None, metavar="K",
                        help="with --max-restarts: a restart leaves out the nodes that cannot be reached (fail "
                             "preflight) while at least K nodes remain; the strategy is rebuilt for them and "
                             "training resumes from the checkpoint. In an elastic job: the fewest nodes it runs on")
    add_elastic_options(parser)
    add_input_options(parser)
    add_checkpoint_options(parser)
    parser.add_argument("--node-failure-status", type=int, default=EXIT_REMOTE_FAILURE, help=argparse.SUPPRESS)
    parser.add_argument("script", metavar="SCRIPT", help="the training script")
    parser.add_argument("script_args", nargs=argparse.REMAINDER, metavar="ARGS",
                        help="arguments passed to the script")
    parser.set_defaults(handler=_run)


def worker_argv(spec, strategy, builder_args, script, script_args, trace_dir=None, logdir=None, verbose=False,
                node_options=()):
    """What the other nodes run after ``python``: this command, with absolute paths.

    ``spec``: the spec file's path, or the spec's data (derived from a Slurm allocation), sent as JSON.
    ``node_options``: more options every node runs with (``--uneven-inputs``...).
    """
    spec_args = ["-r", spec] if isinstance(spec, str) else ["--spec-json", json.dumps(spec, separators=(",", ":"))]
    argv = ["-m", "autodist", "run"] + spec_args + (["--verbose"] if verbose else [])
    if strategy:
        argv += ["-s", strategy]
    for item in builder_args:
        argv += ["--arg", item]
    for flag, value in (("--trace-dir", trace_dir), ("--logdir", logdir)):
        if value:
            argv += [flag, value]
    return argv + list(node_options) + [script] + list(script_args)


def _attempt_argv(args, spec, script, trace_dir, logdir):
    """The command of one supervised attempt: this one without restarts, a node failure exiting NODE_FAILED."""
    argv = worker_argv(spec, args.strategy, args.builder_args, script, args.script_args, trace_dir, logdir,
                       args.verbose, input_argv(args))
    at = argv.index(script)
    console = (["--steps", str(args.steps)] if args.steps else []) + ([] if args.progress else ["--no-progress"])
    console += ["--min-nodes", str(args.min_nodes)] if args.min_nodes else []
    console += ["--launcher", args.launcher] if args.launcher else []
    return [sys.executable] + argv[:at] + console + ["--stall-timeout", repr(args.stall_timeout),
                                                     "--node-failure-status", str(NODE_FAILED)] + argv[at:]


def resource_spec_of(args, environ):
    """``(spec for AutoDist, spec for the other nodes' command line)``: ``-r``'s file, the chief's JSON, or the
    current Slurm allocation's spec."""
    from autodist.runtime.join import platform_started
    from autodist.spec.resource_spec import ResourceSpec
    if args.resource_spec:
        path = os.path.abspath(args.resource_spec)
        return path, path
    if not args.spec_json and platform_started(environ) not in (None, "spec"):
        return None, None   # every process of the job was started by the platform: each joins it
    if args.spec_json:
        data = json.loads(args.spec_json)
    elif environ.get("SLURM_JOB_NODELIST"):
        from autodist.spec.convert import spec_from_slurm
        if not environ.get("SLURMD_NODENAME"):   # e.g. salloc's shell on a login node
            raise ResourceSpecError("SLURMD_NODENAME is not set, so this is not a node of the Slurm allocation; run "
                                    "autodist on one (in the batch script, or in `srun --pty bash`), or give -r "
                                    "SPEC", path="autodist run")
        data = spec_from_slurm(environ, ssh={"username": getpass.getuser()})
    else:
        raise ResourceSpecError("no resource spec: give one with -r SPEC, or run inside a Slurm allocation "
                                "(SLURM_JOB_NODELIST set) to use the allocation's nodes", path="autodist run")
    return ResourceSpec.from_dict(data, path="<Slurm allocation>"), data


def _loaded(spec):
    """``spec`` as a ResourceSpec (it may be the path of its file)."""
    from autodist.spec.resource_spec import ResourceSpec
    return ResourceSpec(spec) if isinstance(spec, str) else spec


def _node_count(spec):
    """The number of nodes of ``spec``: a loaded ResourceSpec or the path of its file (None: a job the platform
    started, whose size is known once its processes are placed)."""
    from autodist.spec.resource_spec import ResourceSpec
    if spec is None:
        return None
    return len((ResourceSpec(spec) if isinstance(spec, str) else spec).node_specs)


def _keep_checkpoints(args, ad):
    """``--checkpoint-dir``: the job saves as it trains and a new run resumes (``runtime.autorun.checkpoints``)."""
    if args.checkpoint_dir is None:
        return
    from autodist.runtime.autorun.checkpoints import ScriptCheckpoints
    from autodist.runtime.notices import notice
    checkpoints = ScriptCheckpoints(args.checkpoint_dir, *checkpoint_schedule(args), ad.job, os.environ,
                                    lambda text: notice(None, text))
    ad.job.after_success.append(checkpoints.finish)


def _run(args):
    from autodist.runner.console import quiet_tensorflow_start
    spec, worker_spec = resource_spec_of(args, os.environ)
    check_checkpoint_options(args)
    elastic = elastic_of(args, _loaded(spec))
    check_min_nodes(args.min_nodes, _node_count(spec), args.max_restarts or os.environ.get(ATTEMPT_ENV) or elastic,
                    name="--min-nodes", restarts_name="--max-restarts")
    script = os.path.abspath(args.script)
    require_file(args.script)
    if args.strategy:   # a builder imports TensorFlow: without its start-up lines, a supervisor's too
        quiet_tensorflow_start(verbose=args.verbose)
    builder = builder_from_args(args)
    trace_dir, logdir = (os.path.abspath(d) if d else None for d in (args.trace_dir, args.logdir))
    if elastic is not None and not os.environ.get(ATTEMPT_ENV):   # the elastic supervisor (runtime.elastic)
        return supervise_elastic(_attempt_argv(args, worker_spec, script, trace_dir, logdir), _loaded(spec), elastic)
    if args.max_restarts:   # this process supervises; each attempt is a chief of its own (runtime.recovery.restart)
        return supervise(_attempt_argv(args, worker_spec, script, trace_dir, logdir), args.max_restarts,
                         args.restart_backoff)
    quiet_tensorflow_start(verbose=args.verbose)   # before anything imports TensorFlow
    from autodist.api import AutoDist
    from autodist.runtime.autorun.run import run_script
    from autodist.runtime.launch.member_server import note_exit
    ad = AutoDist(spec, builder, launch_argv=worker_argv(worker_spec, args.strategy, args.builder_args, script,
                                                         args.script_args, trace_dir, logdir, args.verbose,
                                                         input_argv(args)),
                  trace_dir=trace_dir, logdir=logdir, verbose=args.verbose, progress=args.progress,
                  total_steps=args.steps, stall_timeout=args.stall_timeout,
                  min_nodes=None if elastic else args.min_nodes, launcher=args.launcher,
                  uneven_inputs=args.uneven_inputs, auto_shard=args.auto_shard,
                  accumulation_steps=args.accumulation_steps, sync_batch_norm=args.sync_batch_norm)
    _keep_checkpoints(args, ad)
    try:
        try:
            status = run_script(ad, script, args.script_args)
        except BaseException as e:
            note_exit(1)   # a launched node's process does not stay to serve (runtime.launch.member_server)
            # raises the job's failure, if there was one, chained to this
            ad.finish_job(abort=True, reason="the chief's script was interrupted" if isinstance(
                e, KeyboardInterrupt) else "the chief's script failed ({})".format(type(e).__name__))
            raise
        note_exit(status)
        # A script that exits with an error would leave the other nodes waiting for its steps.
        ad.finish_job(abort=status != 0, reason="the chief's script exited with code {}".format(status))
        if status == 0:
            ad.job.succeeded()   # the checkpoints of --checkpoint-dir go
    except RemoteWorkerError as e:
        print("autodist: error: {}".format(e), file=sys.stderr)
        return args.node_failure_status
    except KeyboardInterrupt:
        print("autodist: interrupted; every process of the job was stopped", file=sys.stderr)
        return EXIT_INTERRUPTED
    return status

"""``autodist run``'s options for elastic jobs and for ``tf.data`` pipelines.

    elastic     --elastic, --host-discovery-script S, --max-nodes M (with --min-nodes K), --discovery-interval S,
                --discovery-settle S, --host-backoff S, --preemption-signal SIG, --preemption-grace S,
                --keep-per-replica-batch
                (the process becomes the elastic supervisor: ``autodist.runtime.elastic``)
    pipelines   --uneven-inputs {end,join}, --auto-shard {off,auto,file,data}: every node runs with them
                (``autodist.capture.datasets``)
    checkpoints --checkpoint-dir DIR [--checkpoint-steps N] [--checkpoint-secs T]: the job saves and resumes
                (``autodist.runtime.autorun.checkpoints``); every node runs with them

Values out of their range exit with status 2 and the option's name, before
anything runs, as the other options of ``autodist run`` (``runtime.limits``).
"""
import os

__all__ = ["add_elastic_options", "add_input_options", "add_checkpoint_options", "input_argv", "elastic_of",
           "check_checkpoint_options", "checkpoint_schedule", "UNEVEN_CHOICES", "AUTO_SHARD_CHOICES",
           "DEFAULT_CHECKPOINT_SECS"]

# autodist.capture.datasets' POLICIES and AUTO_SHARD_POLICIES, named here because building the parser must not
# import TensorFlow (``autodist spec validate`` stays TensorFlow-free); a test keeps them equal
UNEVEN_CHOICES = ("end", "join")
AUTO_SHARD_CHOICES = ("off", "auto", "file", "data")
DEFAULT_CHECKPOINT_SECS = 60.0   # --checkpoint-dir without --checkpoint-steps / --checkpoint-secs


def add_elastic_options(parser):
    group = parser.add_argument_group("elastic jobs (docs/elastic.md)")
    group.add_argument("--elastic", action="store_true",
                       help="nodes may leave (a preemption notice, a failure) and come back; without a discovery "
                            "script every node of the spec is a candidate")
    group.add_argument("--host-discovery-script", metavar="S",
                       help="an executable printing the spec's nodes available now (address or address:slots, one "
                            "a line); run every --discovery-interval s, the job grows and shrinks with it")
    group.add_argument("--max-nodes", type=int, metavar="M", help="at most M nodes (default: the spec's count)")
    group.add_argument("--discovery-interval", type=float, default=5.0, metavar="S",
                       help="seconds between two runs of the discovery script (default: %(default)g)")
    group.add_argument("--discovery-settle", type=float, default=10.0, metavar="S",
                       help="seconds a host must stay listed (or missing) before the job re-plans for it "
                            "(default: %(default)g; 0: at once)")
    group.add_argument("--host-backoff", type=float, default=60.0, metavar="S",
                       help="a failing or preempted host is set aside S s, twice as long at each failure "
                            "(default: %(default)g)")
    group.add_argument("--preemption-signal", default="SIGTERM", metavar="SIG",
                       help="the signal that tells a node it will be preempted (default: %(default)s; none: off)")
    group.add_argument("--preemption-grace", type=float, default=30.0, metavar="S",
                       help="seconds a noticed node waits for the job's checkpoint before it leaves "
                            "(default: %(default)g)")
    group.add_argument("--keep-per-replica-batch", action="store_true",
                       help="scale the global batch with the replicas (AUTODIST_BATCH_SCALE) instead of keeping it")


def add_input_options(parser):
    group = parser.add_argument_group("tf.data pipelines (docs/input_pipelines.md)")
    group.add_argument("--uneven-inputs", choices=UNEVEN_CHOICES,
                       help="when the nodes' inputs end at different steps: end the epoch at the first node's end, "
                            "or let a node without data join the others' steps with nothing")
    group.add_argument("--auto-shard", choices=AUTO_SHARD_CHOICES,
                       help="shard every dataset an iterator is made of over the nodes (tf.distribute's policies)")
    parser.add_argument("--sync-batch-norm", action="store_true",
                        help="every Keras BatchNormalization normalizes with the statistics of the whole job's batch "
                             "(docs/keras.md)")


def add_checkpoint_options(parser):
    from autodist.cli.common import checked
    from autodist.runtime.limits import MAX_SECONDS, seconds, whole
    group = parser.add_argument_group("checkpoints of the job, for any script (docs/running.md)")
    group.add_argument("--checkpoint-dir", metavar="DIR",
                       help="the chief saves the job's state in DIR as it trains; run the same command again after "
                            "a failure and it resumes at the saved step (the script's steps before it are passed "
                            "over), ending with the weights of an uninterrupted run. Removed when the job succeeds")
    group.add_argument("--checkpoint-steps", type=checked(whole, int), metavar="N",
                       help="save every N training steps")
    group.add_argument("--checkpoint-secs", type=checked(lambda v, n: seconds(v, n, 1.0, MAX_SECONDS)), metavar="T",
                       help="save every T seconds (default without --checkpoint-steps: {:g})".format(
                           DEFAULT_CHECKPOINT_SECS))


def check_checkpoint_options(args):
    """``ArgumentError`` for checkpoint options that cannot work together with the others."""
    from autodist.errors import ArgumentError
    if args.checkpoint_dir is None:
        if args.checkpoint_steps is not None or args.checkpoint_secs is not None:
            raise ArgumentError("--checkpoint-steps and --checkpoint-secs say how often --checkpoint-dir saves: "
                                "give --checkpoint-dir DIR too")
        return
    if args.uneven_inputs is not None:
        raise ArgumentError("--checkpoint-dir with --uneven-inputs: a resumed job passes over the steps its "
                            "checkpoint holds by drawing their batches, which the read-ahead of uneven inputs "
                            "does not allow; leave one out")


def input_argv(args):
    """The options of the training step every node runs with (its inputs, accumulation, batch norm, checkpoints)."""
    argv = ["--sync-batch-norm"] if getattr(args, "sync_batch_norm", False) else []
    text = lambda value: None if value is None else str(value)  # noqa: E731
    directory = getattr(args, "checkpoint_dir", None)
    for flag, value in (("--uneven-inputs", args.uneven_inputs), ("--auto-shard", args.auto_shard),
                        ("--accumulation-steps", text(getattr(args, "accumulation_steps", None))),
                        ("--checkpoint-dir", os.path.abspath(directory) if directory else None),
                        ("--checkpoint-steps", text(getattr(args, "checkpoint_steps", None))),
                        ("--checkpoint-secs", text(getattr(args, "checkpoint_secs", None)))):
        if value:
            argv += [flag, value]
    return argv


def checkpoint_schedule(args):
    """``(steps, secs)`` between two saves as the options give them: without either, every
    ``DEFAULT_CHECKPOINT_SECS`` s."""
    if args.checkpoint_steps is None and args.checkpoint_secs is None:
        return None, DEFAULT_CHECKPOINT_SECS
    return args.checkpoint_steps, args.checkpoint_secs


def elastic_of(args, spec):
    """``ElasticSettings`` when the options make the job elastic, else None; ``ArgumentError`` out of range."""
    from autodist.runtime.elastic import elastic_settings
    names = {"min_nodes": "--min-nodes", "max_nodes": "--max-nodes", "interval": "--discovery-interval",
             "host_backoff": "--host-backoff", "preemption_signal": "--preemption-signal",
             "preemption_grace": "--preemption-grace", "script": "--host-discovery-script",
             "settle": "--discovery-settle"}
    return elastic_settings(spec, args.elastic, args.host_discovery_script, args.min_nodes, args.max_nodes,
                            args.discovery_interval, args.host_backoff, args.preemption_signal,
                            args.preemption_grace, args.max_restarts, args.restart_backoff,
                            args.keep_per_replica_batch, names=names, settle=args.discovery_settle)

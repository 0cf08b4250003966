"""``autodist spec validate FILE...`` and ``autodist spec schema``.

``validate`` loads each file with the same checks ``AutoDist`` runs, so a spec
that passes here is accepted at launch. Per file it prints one line: a summary
on stdout or ``autodist: error: <file>:<line>: <key>: <problem>`` on stderr
(before the summary, ``autodist: warning: ...`` lines on stderr say what may
still fail at launch: a ``key_file`` missing here, shell syntax in ``python_venv``);
the exit status is 2 if any file failed. ``schema`` prints every key with its
default and meaning, generated from the schema the checks use.
"""
import sys

from autodist.cli.common import EXIT_USER_ERROR, USER_ERRORS, command_group, report_error
from autodist.spec.resource_spec import ResourceSpec
from autodist.spec.schema import describe_schema

__all__ = ["register", "spec_actions", "summary"]


def spec_actions(subparsers):
    """The action registry of ``autodist spec``, shared with ``autodist.cli.spec_convert``."""
    return command_group(subparsers, "spec", "check and inspect resource spec files")


def register(subparsers):
    actions = spec_actions(subparsers)
    validate = actions.add_parser(
        "validate", help="check resource spec files and summarize them",
        description="Check resource spec files; print a one-line summary or the error of each.")
    validate.add_argument("files", nargs="+", metavar="FILE", help="a resource spec (YAML)")
    validate.set_defaults(handler=_validate)
    schema = actions.add_parser(
        "schema", help="list every key of a resource spec with its default and meaning",
        description="List every key of a resource spec with its default and meaning.")
    schema.set_defaults(handler=_schema)


def _plural(count, word):
    return "{} {}{}".format(count, word, "" if count == 1 else "s")


def summary(spec):
    """``two_nodes.yml: ok: 2 nodes, 6 devices (2 CPU, 4 GPU), chief 10.0.0.1``."""
    label = spec.path if spec.name is None else "{} ({})".format(spec.path, spec.name)
    return "{}: ok: {}, {} ({} CPU, {} GPU), chief {}".format(
        label, _plural(len(spec.nodes), "node"), _plural(len(spec.devices), "device"),
        spec.num_cpus, spec.num_gpus, spec.chief)


def _validate(args):
    status = 0
    for path in args.files:
        try:
            spec = ResourceSpec(path)
        except USER_ERRORS as exc:
            report_error(exc)
            status = EXIT_USER_ERROR
            continue
        for warning in spec.warnings:
            print("autodist: warning: " + warning, file=sys.stderr)
        print(summary(spec))
    return status


def _schema(args):
    print("Keys of a resource spec (YAML); nodes[] is a list, ssh.<name> a named group.")
    for line in describe_schema():
        print(line)
    return 0

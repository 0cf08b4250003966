"""The ``autodist`` command line (console script and ``python -m autodist``).

    autodist spec validate resource_specs/two_nodes.yml
    autodist spec schema
    autodist spec from-tf-config -o cluster.yml
    autodist run -r resource_specs/two_nodes.yml -s PS train.py --epochs 3

Sub-commands live in this package, one module per group (shared helpers in
``common``), listed in
:data:`COMMANDS`. Failures the user can fix (a malformed spec, a missing file,
any :class:`~autodist.errors.AutoDistError`) print ``autodist: error: <message>``
on stderr and exit with status 2, like argparse's usage errors, without a
traceback: the message already names the file, line and key. Ctrl-C ends
any command with ``autodist: interrupted`` and status 130, without a
traceback (``autodist run`` says more: every process of its job was
stopped). Any other exception is a bug in autodist and keeps its traceback.
"""
import argparse
import sys

from autodist import __version__
from autodist.cli.common import EXIT_INTERRUPTED, EXIT_USER_ERROR, USER_ERRORS, report_error
from autodist.cli import calibrate, cluster, plan, run, spec, spec_convert

__all__ = ["main", "build_parser", "COMMANDS"]

#: Command modules, each with ``register(subparsers)``.
COMMANDS = (spec, spec_convert, plan, calibrate, run, cluster)


def build_parser():
    parser = argparse.ArgumentParser(
        prog="autodist",
        description="Distributed data-parallel training for TensorFlow graphs.")
    parser.add_argument("--version", action="version", version="autodist " + __version__)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in COMMANDS:
        module.register(subparsers)
    return parser


def main(argv=None):
    """Run the command line; returns the exit status instead of exiting."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:   # --help, --version and usage errors end argparse's way
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    try:
        return args.handler(args)
    except USER_ERRORS as exc:
        report_error(exc)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:   # Ctrl-C: what it stopped has been cleaned up on the way out; no traceback
        print("autodist: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED

"""Sub-commands of the ``autodist`` command line, one module per command group.

A command module exposes ``register(subparsers)``: it adds its parser(s) and
sets ``handler=<function(args) -> exit status>`` with ``set_defaults``.
``autodist.cli.COMMANDS`` lists the modules; adding a command is one entry there.

Handlers import heavy dependencies (TensorFlow) inside their body, never at
module level: every command module is imported to build the parser, and
``autodist spec validate`` must stay TensorFlow-free and fast.

Several modules may add actions to one group (``autodist spec validate`` here,
``autodist spec from-slurm`` elsewhere) through :func:`command_group`.
"""
import argparse
import sys

from autodist.errors import ArgumentError, AutoDistError
from autodist.runtime.recovery.restart import EXIT_INTERRUPTED   # Ctrl-C: 130, as the shell reports SIGINT

__all__ = ["command_group", "count", "checked", "report_error", "EXIT_USER_ERROR", "EXIT_INTERRUPTED", "USER_ERRORS"]

#: Exit status of a failure the user can fix (bad spec, missing file); argparse uses it too.
EXIT_USER_ERROR = 2

#: Exceptions reported as one line without a traceback; anything else is a bug.
USER_ERRORS = (AutoDistError, OSError)


def command_group(subparsers, name, help):
    """The action registry of ``autodist <name> ...``, created on first use.

    Returns the ``add_parser``-able object of the group, so that each module
    registers its own actions without knowing which module created the group.
    """
    parser = subparsers.choices.get(name)
    if parser is None:
        parser = subparsers.add_parser(name, help=help, description=help)
        # Stored on the parser itself: the parser is the group's only shared state.
        parser.autodist_actions = parser.add_subparsers(
            dest=name.replace("-", "_") + "_action", metavar="ACTION", required=True)
    return parser.autodist_actions


def report_error(exc, stream=None):
    """Print ``autodist: error: <message>`` for a user error, on one line (a line per problem of a spec file).

    Code that reads or writes a file the user should know about says which
    (``LaunchError: cannot write ...``); a bare ``OSError`` gets its path(s) and
    reason, and "cannot read" only when the file is missing.
    """
    for problem in getattr(exc, "problems", ()):   # a ResourceSpecError listing every problem of its file
        print("autodist: error: " + str(problem), file=stream or sys.stderr)
    if getattr(exc, "problems", None):
        return
    if isinstance(exc, FileNotFoundError) and exc.filename is not None and exc.filename2 is None:
        message = "cannot read {}: {}".format(exc.filename, exc.strerror)   # an input that is not there
    elif isinstance(exc, OSError) and exc.filename is not None and exc.strerror:
        # which operation failed is not known here: name the path(s), never guess "read" or "write"
        paths = exc.filename if exc.filename2 is None else "{} -> {}".format(exc.filename, exc.filename2)
        message = "{}: {}".format(paths, exc.strerror)
    else:
        message = str(exc)
    message = " ".join(message.splitlines()) or type(exc).__name__
    print("autodist: error: " + message, file=stream or sys.stderr)


def count(text):
    """An argparse type: a whole number, 0 or more (argparse names the option in its error)."""
    if not text.isdigit():
        raise argparse.ArgumentTypeError("expected a non-negative integer, got {!r}".format(text))
    return int(text)


def checked(check, parse=float):
    """An argparse type from a check of ``autodist.runtime.limits``: ``parse`` the text, then ``check(value,
    name)``; argparse names the option in its usage error (exit status 2)."""
    def convert(text):
        try:
            value = parse(text)
        except ValueError:
            raise argparse.ArgumentTypeError("expected a number, got {!r}".format(text)) from None
        try:
            return check(value, "the value")
        except ArgumentError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    return convert

"""The ``profdsl`` command line (also ``python -m profdsl``).

Subcommands are listed in :data:`COMMANDS`; each is a small module with a one-line ``HELP``, an
``EXAMPLES`` epilog, an ``add_arguments(parser)`` and a ``run(args) -> int``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from profdsl._version import __version__

__all__ = ["COMMANDS", "build_parser", "main"]

#: Subcommand name -> the module that implements it.
COMMANDS: dict[str, str] = {
    "demo": "profdsl._demo",
    "ls": "profdsl._cli.ls",
    "check": "profdsl._cli.check",
    "summary": "profdsl._cli.summary",
    "merge": "profdsl._cli.merge",
    "plot": "profdsl._cli.plot",
    "export": "profdsl._cli.export",
    "plan": "profdsl._cli.plan",
    "trigger": "profdsl._cli.trigger",
    "diff": "profdsl._cli.diff",
}

_EPILOG = """\
examples:
  profdsl --version
  profdsl COMMAND --help

docs: see docs/index.md in the profdsl source tree
"""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every registered subcommand."""
    parser = argparse.ArgumentParser(
        prog="profdsl",
        description="Profile distributed RL / LLM training, and read what was captured.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"profdsl {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module in COMMANDS.items():
        command = importlib.import_module(module)
        layout = {"epilog": command.EXAMPLES, "formatter_class": argparse.RawDescriptionHelpFormatter}
        command.add_arguments(sub.add_parser(name, help=command.HELP, description=command.HELP, **layout))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit code (2 for usage errors). Run as the
    program (``argv`` None), it quiets kineto's log lines unless the user set their level
    (:mod:`profdsl.core._kineto`)."""
    if argv is None:
        from profdsl.core._kineto import quiet_kineto

        quiet_kineto()
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(importlib.import_module(COMMANDS[args.command]).run(args))
    except BrokenPipeError:  # `profdsl ls DIR | head`: the reader left, nothing is wrong
        sys.stderr.close()
        return 0

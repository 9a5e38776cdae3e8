"""The ``profdsl`` command line (also ``python -m profdsl``).

Subcommands register themselves in :data:`COMMANDS`; each is a small module with an
``add_arguments(parser)`` and a ``run(args) -> int``, imported only when it runs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from profdsl._version import __version__

__all__ = ["COMMANDS", "build_parser", "main"]

#: name -> (module path, one-line help). Filled as commands land.
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("profdsl.demo", "run a toy RL loop on CPU, profiled end to end (--ray for Ray actors)"),
    "ls": ("profdsl.commands.ls", "list the artifacts of a profiles folder"),
    "check": ("profdsl.commands.check", "check that every trace is there, whole and readable"),
    "summary": ("profdsl.commands.summary", "time per role / stage / step / rank"),
    "merge": ("profdsl.commands.merge", "merge a folder's traces into one timeline, a row per role and rank"),
    "plot": ("profdsl.commands.plot", "plot per-stage time per rank and step (or a timeline) to a PNG"),
    "plan": ("profdsl.commands.plan", "show what a profiler config will capture, before a run"),
}

_EPILOG = """\
examples:
  profdsl --version
  profdsl COMMAND --help

docs: see docs/index.md in the profdsl source tree
"""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every registered subcommand."""
    import importlib

    parser = argparse.ArgumentParser(
        prog="profdsl",
        description="Profile distributed RL / LLM training, and read what was captured.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"profdsl {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        command = importlib.import_module(module)
        command.add_arguments(sub.add_parser(name, help=help_text, description=help_text))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit code (2 for usage errors)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    import importlib

    module, _help = COMMANDS[args.command]
    try:
        return int(importlib.import_module(module).run(args))
    except BrokenPipeError:  # `profdsl ls DIR | head`: the reader left, nothing is wrong
        sys.stderr.close()
        return 0

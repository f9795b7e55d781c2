"""Command-line entry point: ``pyinterpose <command> ...`` (also ``python -m pyinterpose``).

One module per command in this package; each exposes ``register(subparsers)``
which adds its parser and sets ``func`` to a callable ``(args) -> int``.
"""
from __future__ import annotations

import argparse
import importlib
import signal
import sys

from ..errors import PyinterposeError

# Order = order in --help.
COMMANDS = ["run", "summary", "iterations", "access", "pools", "plan", "swap", "bandwidth",
            "report", "compare", "export", "demo"]


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    parser = argparse.ArgumentParser(
        prog="pyinterpose",
        description="GPU-memory profiler for deep-learning training (CUDA interposition).",
    )
    parser.add_argument("--version", action="version", version=f"pyinterpose {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        try:
            mod = importlib.import_module(f".{name}", __name__)
        except ModuleNotFoundError as e:  # a command not built yet in this checkout
            if e.name == f"{__name__}.{name}":
                continue
            raise
        mod.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args.func(args) or 0)
    except PyinterposeError as e:
        print(f"pyinterpose: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        return 128 + signal.SIGINT
    except BrokenPipeError:
        return 0

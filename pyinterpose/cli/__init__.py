"""Command-line entry point: ``pyinterpose <command> ...`` (also ``python -m pyinterpose``).

One module per command in this package; each exposes ``register(subparsers)``
which adds its parser and sets ``func`` to a callable ``(args) -> int``.
"""
from __future__ import annotations

import importlib
import signal
import sys

from ..errors import PyinterposeError
from ._args import Parser, check_outputs

# Order = order in --help.
COMMANDS = ["run", "summary", "iterations", "access", "pools", "plan", "swap", "bandwidth",
            "report", "compare", "export", "demo"]


def build_parser() -> Parser:
    from .. import __version__

    parser = Parser(
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
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help, --version, or a bad flag (one line already printed)
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        check_outputs(args)
        return int(args.func(args) or 0)
    except PyinterposeError as e:
        print(f"pyinterpose: error: {e}", file=sys.stderr)
        return e.exit_code
    except OSError as e:  # a write that failed late (disk full, file-size limit): one line, no traceback
        if isinstance(e, BrokenPipeError):
            return 0
        where = f" {e.filename}" if getattr(e, "filename", None) else ""
        print(f"pyinterpose: error: cannot write{where}: {e.strerror or e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 128 + signal.SIGINT
    except BrokenPipeError:
        return 0

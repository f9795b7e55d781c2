"""Command-line entry point: ``pyinterpose <command> ...`` (also ``python -m pyinterpose``).

One module per command in this package; each exposes ``register(subparsers)``
which adds its parser and sets ``func`` to a callable ``(args) -> int``.
"""
from __future__ import annotations

# Lazy imports (in functions): `pyinterpose --help`/`run` start-up loads only the parser, not the analyses.

import importlib
import os
import re
import signal
import sys

from ..errors import PyinterposeError
from ..heap import keep_freed_memory
from ._args import Parser, check_outputs

# Order = order in --help.
COMMANDS = ["run", "summary", "iterations", "access", "pools", "plan", "swap", "bandwidth", "fit",
            "report", "compare", "diff", "export", "demo"]


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
    # "-1GiB" after an option is that option's value (argparse takes only plain negative numbers as values)
    for p in [parser, *sub.choices.values()]:
        p._negative_number_matcher = re.compile(r"^-\.?\d")
    for name, p in sub.choices.items():   # every command that reads a trace: the columnar cache switch
        if name != "run":
            p.add_argument("--no-cache", action="store_true",
                           help="neither read nor write the memory-mapped table cache beside the trace "
                                "(<trace>.picache/, see docs/performance.md)")
    return parser


def _import_numpy_without_blas_threads() -> None:
    """Import numpy with OpenBLAS on one thread, then put the environment back.

    No analysis calls BLAS, but OpenBLAS starts a server thread per core at import, which
    spins for a while: CPU taken from the analysis on a small machine. The variable is read
    once, when the library loads, and is removed again at once so that the program that
    ``run`` starts inherits the user's own environment."""
    if "numpy" in sys.modules or "OPENBLAS_NUM_THREADS" in os.environ:
        return
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    try:
        import numpy  # noqa: F401
    except ImportError:
        pass
    finally:
        os.environ.pop("OPENBLAS_NUM_THREADS", None)


def main(argv: list[str] | None = None) -> int:
    _import_numpy_without_blas_threads()
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help, --version, or a bad flag (one line already printed)
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    if args.command != "run":
        keep_freed_memory()
    if getattr(args, "no_cache", False):   # read by pyinterpose.trace.colcache, here and in worker processes
        os.environ["PYINTERPOSE_NO_CACHE"] = "1"
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

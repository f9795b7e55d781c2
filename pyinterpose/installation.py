"""Where the package's built native parts live, and what to say when one is missing.

Below every layer (capture, trace and the CLI all load native parts): imports nothing of pyinterpose."""
from __future__ import annotations

import os

NATIVE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_native")
SHIM = os.path.join(NATIVE, "libpyinterpose.so")
SIMCUDA = os.path.join(NATIVE, "simcuda")


def not_built_message(missing: str) -> str:
    """Why a native piece is missing, and what helps."""
    pkg = os.path.dirname(NATIVE)
    src = os.path.dirname(pkg)
    name = os.path.relpath(missing, pkg)
    if os.path.exists(os.path.join(src, "pyproject.toml")) or os.path.exists(os.path.join(src, "setup.py")):
        msg = f"pyinterpose is imported from the source tree {pkg}, which is not built ({name} is missing)"
        try:
            here = os.path.samefile(src, os.getcwd())
        except OSError:
            here = False
        if here:
            return msg + ("; `python -m` puts the current directory first: use the installed `pyinterpose` "
                          "command, run from another directory, or build in place: python pyinterpose/_build.py")
        return msg + ": build it in place with `python pyinterpose/_build.py` (or `pip install -e .`)"
    return f"{name} is missing from the installed pyinterpose ({pkg}): reinstall it (pip install --force-reinstall)"

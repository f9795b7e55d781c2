"""``run -o`` templates: one trace per node (or per rank) of a multi-node job.

    srun -N 4 --ntasks-per-node 8 pyinterpose run -o 'trace-{host}-{rank}.pit' -- python train.py
    pyinterpose run -o 'trace-{host}.pit' -- torchrun --nproc-per-node 8 train.py   # one trace per node

Fields: ``{host}`` (this machine's name), ``{pid}`` (the ``pyinterpose run`` process), ``{rank}``,
``{local_rank}``, ``{world_size}`` (from the environment ``run`` starts in: RANK, SLURM_PROCID,
OMPI_COMM_WORLD_RANK, ... — pyinterpose.trace.context.rank_context), ``{{`` and ``}}`` for braces.
A field the environment does not give is an error, as is an unknown field.
"""
from __future__ import annotations

import os
import platform
import string

from ..errors import PyinterposeError
from ..trace.context import rank_context

FIELDS = ("host", "pid", "rank", "local_rank", "world_size")


def expand(template: str, env: dict | None = None) -> str:
    """The file name ``template`` gives in this process and environment."""
    if "{" not in template and "}" not in template:
        return template
    env = dict(os.environ if env is None else env)
    ctx = rank_context(env)
    values = {"host": platform.node() or "host", "pid": str(os.getpid())}
    for k in ("rank", "local_rank", "world_size"):
        if ctx[k] is not None:
            values[k] = str(ctx[k])
    out = []
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as e:
        raise PyinterposeError(f"-o {template}: {e} (write {{{{ and }}}} for literal braces)")
    for literal, field, spec, conv in parsed:
        out.append(literal)
        if field is None:
            continue
        if field not in FIELDS or spec or conv:
            raise PyinterposeError(f"-o {template}: unknown field {{{field}}} (known: "
                                   + ", ".join("{" + f + "}" for f in FIELDS) + ")")
        if field not in values:
            raise PyinterposeError(f"-o {template}: {{{field}}} is not known here: no rank variable (RANK, "
                                   "SLURM_PROCID, OMPI_COMM_WORLD_RANK, JAX_PROCESS_ID, ...) in the environment")
        out.append(values[field])
    return "".join(out)

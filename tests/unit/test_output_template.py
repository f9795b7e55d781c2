"""run -o templates: one trace per node or rank of a job."""
from __future__ import annotations

import os
import platform

import pytest

from pyinterpose.capture.output import expand
from pyinterpose.errors import PyinterposeError


def test_fields_come_from_this_machine_and_the_rank_environment():
    env = {"SLURM_PROCID": "12", "SLURM_NTASKS": "32", "SLURM_LOCALID": "4"}
    got = expand("t-{host}-{rank}-{local_rank}-of-{world_size}-{pid}.pit", env)
    assert got == f"t-{platform.node()}-12-4-of-32-{os.getpid()}.pit"
    assert expand("t-{rank}.pit", {"RANK": "3", "SLURM_PROCID": "0"}) == "t-3.pit"   # torchrun's RANK first
    assert expand("plain.pit", {}) == "plain.pit"
    assert expand("a-{{x}}-{rank}.pit", {"RANK": "1"}) == "a-{x}-1.pit"


@pytest.mark.parametrize("template, why", [("t-{rank}.pit", "not known here"), ("t-{node}.pit", "unknown field"),
                                           ("t-{rank.pit", "braces"), ("t-{host!r}.pit", "unknown field")])
def test_bad_templates_say_why(template, why):
    with pytest.raises(PyinterposeError, match=why):
        expand(template, {})

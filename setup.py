"""Build glue: the cffi extension (pyinterpose._core) plus the plain native
libraries (preload shim, simcuda, simtrain) compiled by pyinterpose/_build.py.

Both ``pip install .`` and ``pip install -e .`` build everything: the plain
libraries are made by the build_ext step, next to the extension (in place for
editable installs)."""
import os
import sys

from setuptools import setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "pyinterpose"))
import _build  # noqa: E402  (pyinterpose/_build.py, importable without the package)


class BuildExtWithNative(build_ext):
    def run(self):
        super().run()
        if self.inplace or getattr(self, "editable_mode", False):
            out = os.path.join(HERE, "pyinterpose", "_native")
        else:
            out = os.path.join(self.build_lib, "pyinterpose", "_native")
        _build.build_native(out)

    def get_outputs(self):
        outs = super().get_outputs()
        base = os.path.join(self.build_lib, "pyinterpose", "_native")
        for root, _, files in os.walk(base):
            outs += [os.path.join(root, f) for f in files]
        return outs


setup(
    cmdclass={"build_ext": BuildExtWithNative},
    cffi_modules=["pyinterpose/_build.py:ffibuilder"],
)

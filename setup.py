"""Build glue: the cffi extension (pyinterpose._core) plus the plain native
libraries (preload shim, simcuda, simtrain) compiled by pyinterpose/_build.py."""
import os
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "pyinterpose"))
import _build  # noqa: E402  (pyinterpose/_build.py, importable without the package)


class BuildPyWithNative(build_py):
    def run(self):
        super().run()
        out = os.path.join(self.build_lib, "pyinterpose", "_native")
        _build.build_native(out)


setup(
    cmdclass={"build_py": BuildPyWithNative},
    cffi_modules=["pyinterpose/_build.py:ffibuilder"],
)

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
        if not (self.inplace or getattr(self, "editable_mode", False)):
            _copy_samples(os.path.join(self.build_lib, "pyinterpose", "_samples"))

    def get_outputs(self):
        outs = super().get_outputs()
        for sub in ("_native", "_samples"):
            base = os.path.join(self.build_lib, "pyinterpose", sub)
            for root, _, files in os.walk(base):
                outs += [os.path.join(root, f) for f in files]
        return outs


def _copy_samples(dest):
    """The real-GPU sample traces (samples/) go into the installed package for `demo --sample`."""
    import shutil

    src = os.path.join(HERE, "samples")
    if not os.path.isdir(src):
        return
    os.makedirs(dest, exist_ok=True)
    for name in os.listdir(src):
        if name.endswith((".pit", ".json", ".md")):
            shutil.copy2(os.path.join(src, name), os.path.join(dest, name))


setup(
    cmdclass={"build_ext": BuildExtWithNative},
    cffi_modules=["pyinterpose/_build.py:ffibuilder"],
)

"""pyinterpose.heap.give_back: with the CLI's heap settings (freed memory kept for reuse), the
pages of freed arrays stay resident until give_back hands them to the kernel."""
import subprocess
import sys

CODE = """
import numpy as np
from pyinterpose.heap import give_back, keep_freed_memory
def anon():
    for line in open('/proc/self/status'):
        if line.startswith('RssAnon'):
            return int(line.split()[1]) // 1024
assert keep_freed_memory()
keep = np.ones(1 << 20)                     # a live array above the freed ones: no trim from the top
parts = [np.ones(8 << 20) for _ in range(4)]  # 4 x 64 MiB, touched
last = np.ones(1 << 20)
del parts
before = anon()
ok = give_back()
print(before, anon(), ok)
"""


def test_give_back_returns_freed_heap_pages():
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, check=True).stdout.split()
    before, after, ok = int(out[0]), int(out[1]), out[2]
    assert ok == "True"
    assert before - after >= 200          # MiB: the freed 256 MiB are no longer resident

"""The data flow, enforced: capture -> trace -> analysis -> report -> cli (docs/architecture.md).

The import-linter contract in pyproject.toml (``[tool.importlinter]``) must hold: no module imports a
layer above its own, at module level or inside a function, and independent siblings (analysis and
capture; cli and examples) never import each other."""
from __future__ import annotations

import ast
import os
import sys

import grimp
import pytest

importlinter_cli = pytest.importorskip("importlinter.cli")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PYPROJECT = os.path.join(ROOT, "pyproject.toml")


def _function_imports(path: str) -> list[tuple[int, int, str, list[str]]]:
    """(line, level, module, names) of the relative imports made inside a function of one file."""
    tree = ast.parse(open(path).read())
    out = []
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                if isinstance(node, ast.ImportFrom) and node.level:
                    out.append((node.lineno, node.level, node.module or "", [a.name for a in node.names]))
    return out


def test_the_layers_contract_holds():
    sys.path.insert(0, ROOT)
    try:
        rc = importlinter_cli.lint_imports(config_filename=PYPROJECT, no_cache=True, no_logo=True)
    finally:
        sys.path.remove(ROOT)
    assert rc == 0, "an import runs against the flow: run `lint-imports` for the chain"


@pytest.mark.slow
def test_the_contract_sees_imports_inside_functions():
    """grimp (what import-linter checks) counts an import made inside a function: every one of the
    package's in-function imports of another pyinterpose module is an edge of its graph."""
    graph = grimp.build_graph("pyinterpose", cache_dir=None)
    seen = 0
    for dirpath, _, files in os.walk(os.path.join(ROOT, "pyinterpose")):
        for f in files:
            if not f.endswith(".py"):
                continue
            path = os.path.join(dirpath, f)
            mod = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
            pkg = mod.rsplit(".", 1)[0] if f != "__init__.py" else mod[: -len(".__init__")]
            for line, level, target, names in _function_imports(path):
                base = pkg.rsplit(".", level - 1)[0] if level > 1 else pkg
                module = f"{base}.{target}" if target else base
                # `from X import y`: an import of the module X.y when there is one, else of X
                candidates = [c for c in [f"{module}.{n}" for n in names] + [module] if c in graph.modules]
                if not candidates:
                    continue                     # a compiled module (_core) grimp has no source for
                assert any(graph.direct_import_exists(importer=mod if f != "__init__.py" else pkg, imported=c)
                           for c in candidates), (mod, candidates, line)
                seen += 1
    assert seen > 20    # the package has many; a graph that skipped them would fail above


def _cycles(adj: dict[str, list[str]]) -> list[list[str]]:
    """The import graph's strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    for root in sorted(adj):
        if root in index:
            continue
        work = [(root, iter(adj[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(adj[w])))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_the_import_graph_has_no_cycle():
    """No two modules import each other, directly or through others, at module level or inside a
    function (the layers contract cannot see a cycle within one layer)."""
    graph = grimp.build_graph("pyinterpose", cache_dir=None)
    adj = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    assert _cycles(adj) == []


def test_the_cycle_check_finds_a_cycle():
    assert _cycles({"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]}) == [["a", "b", "c"]]

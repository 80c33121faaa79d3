"""Nothing on the wire is pickled: no module of the package imports a pickler (pickle,
cloudpickle, dill, marshal, shelve). Engines pickle users' functions themselves; the
package only makes its wrappers picklable for them, by the standard protocol."""

from __future__ import annotations

import ast
import pathlib

import workerscope

PICKLERS = {"pickle", "_pickle", "cPickle", "cloudpickle", "dill", "marshal", "shelve"}


def _imports(path: pathlib.Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id == "__import__" and node.args
              and isinstance(node.args[0], ast.Constant)):
            names.add(str(node.args[0].value).split(".")[0])
    return names


def test_no_module_of_the_package_imports_a_pickler():
    root = pathlib.Path(workerscope.__file__).parent
    files = sorted(root.rglob("*.py"))
    assert len(files) > 50  # the whole package was read
    found = {str(p.relative_to(root)): _imports(p) & PICKLERS for p in files}
    assert not {p: names for p, names in found.items() if names}

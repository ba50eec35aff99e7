"""The test tree's own layout: no test file imports another.

A test file holds tests; what two files share lives in tests/pylib (a
module per theme: load, startup, tmpfs, schedules...) or helpers.py.
Importing another test_ module drags in its tests, fixtures and
module-level set-up, and ties one feature's file to another's internals.
This reads every Python file of tests/integration and tests/pylib (imports
at any depth, inside functions too) and fails on an import of a test_
module. No service, no broker.
"""

import ast
import os

HERE = os.path.dirname(os.path.abspath(__file__))
PYLIB = os.path.normpath(os.path.join(HERE, "..", "pylib"))



def imported_modules(path):
    """(line, module name) of every import in the file."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), filename=path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.lineno, node.module


def python_files():
    for folder in (HERE, PYLIB):
        for name in sorted(os.listdir(folder)):
            if name.endswith(".py"):
                yield os.path.join(folder, name)


def test_no_test_file_imports_another():
    found = []
    for path in python_files():
        for line, module in imported_modules(path):
            leaf = module.rsplit(".", 1)[-1]
            if leaf.startswith("test_"):
                found.append(f"{os.path.relpath(path, os.path.dirname(PYLIB))}:"
                             f"{line} imports {module}")
    assert not found, ("a test file imports another; move what they share "
                       "into tests/pylib:\n  " + "\n  ".join(found))

"""The code's shape, as README's Files table states it: imports only go down that table (each module imports only
modules listed above it, lazy imports included), so there is no cycle; no module or test file over 800 lines, no
function over 80."""
import ast
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def files_table_order() -> list:
    """Module names in the order README's Files table lists them."""
    readme = open(os.path.join(ROOT, "README.md")).read()
    table = readme[readme.index("## Files"):readme.index("## Changing it")]
    return re.findall(r"^\| `(\w+)\.py` \|", table, flags=re.M)


def imported_modules(path: str, known: set) -> set:
    """The project modules a file imports anywhere in it (top level or inside functions)."""
    names = set()
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names & known


def test_every_module_is_in_the_files_table_and_imports_only_modules_above_it():
    order = files_table_order()
    modules = sorted(f[:-3] for f in os.listdir(ROOT) if f.endswith(".py"))
    assert sorted(order) == modules, set(order) ^ set(modules)
    upward = [f"{name} imports {other}" for index, name in enumerate(order)
              for other in imported_modules(os.path.join(ROOT, name + ".py"), set(order))
              if other != name and order.index(other) > index]
    assert not upward, upward


def test_no_file_over_800_lines_and_no_function_over_80():
    tests = sorted(os.path.join("tests", f) for f in os.listdir(os.path.join(ROOT, "tests")) if f.endswith(".py"))
    too_long = []
    for name in [module + ".py" for module in files_table_order()] + tests:   # the modules and their tests
        source = open(os.path.join(ROOT, name)).read()
        if len(source.splitlines()) > 800:
            too_long.append(f"{name}: {len(source.splitlines())} lines")
        too_long += [f"{name}:{node.lineno} {node.name}: {node.end_lineno - node.lineno + 1} lines"
                     for node in ast.walk(ast.parse(source))
                     if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 80]
    assert not too_long, too_long

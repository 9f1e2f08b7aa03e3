"""The package's imports: no cycle between its modules, and each module imports alone.

The import graph is read from the source with :mod:`ast`: every ``import`` and
``from ... import`` statement, inside functions too, relative ones resolved;
``from P import x`` is an edge to ``P.x`` when that is a module, and to ``P``
when ``x`` is a name ``P`` defines or ``P`` is not a package the importer lies
in (importing it runs its ``__init__``). Imports under ``if TYPE_CHECKING:`` are
never run, so they are no edges of the graph of what runs (cycles, each module
imported alone); they are edges of the graph of what a module names
(``type_checking=True``), which the order of the stages checks: an annotation that
reaches a later stage is a dependency too, one Python never sees.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
import textwrap

PACKAGE = "onnx_light"


def package_modules(root: str, package: str) -> dict[str, str]:
    """{dotted module name: file} of every module of the package whose folder is ``root``."""
    modules = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        parts = [package, *os.path.relpath(folder, root).split(os.sep)]
        parts = [p for p in parts if p != "."]
        if "__init__.py" not in files:
            continue
        for name in sorted(files):
            if name.endswith(".py"):
                stem = name[:-3]
                dotted = ".".join(parts if stem == "__init__" else [*parts, stem])
                modules[dotted] = os.path.join(folder, name)
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, type_checking: bool = False):
    """Every Import / ImportFrom node of ``tree``; those under ``if TYPE_CHECKING:``
    only when ``type_checking`` is true."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If) and _is_type_checking(node.test) and not type_checking:
            stack.extend(node.orelse)
        else:
            stack.extend(ast.iter_child_nodes(node))


def _ancestors(module: str) -> set[str]:
    parts = module.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts))}


def import_graph(modules: dict[str, str], type_checking: bool = False) -> dict[str, set[str]]:
    """{module: modules of the package it imports}, as the module docstring says
    (with ``type_checking``, the imports under ``if TYPE_CHECKING:`` too)."""
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        is_package = os.path.basename(path) == "__init__.py"
        here = module if is_package else module.rpartition(".")[0]
        inside = _ancestors(module) | ({module} if is_package else set())
        edges: set[str] = set()

        def add(target: str, inside=inside, edges=edges) -> None:
            # importing a.b.c runs the __init__ of a and a.b, but those the importer lies in
            for name in (*sorted(_ancestors(target) - inside), target):
                if name in modules:
                    edges.add(name)

        for node in _imports(tree, type_checking):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    add(alias.name)
                continue
            if node.level:
                base = here.rsplit(".", node.level - 1)[0] if node.level > 1 else here
                source = f"{base}.{node.module}" if node.module else base
            else:
                source = node.module or ""
            if source not in modules:
                continue  # another package's module
            names_only_modules = True
            for alias in node.names:
                if f"{source}.{alias.name}" in modules:
                    add(f"{source}.{alias.name}")
                else:
                    names_only_modules = False
            if not names_only_modules or source not in inside:
                add(source)
        edges.discard(module)
        graph[module] = edges
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle ``[a, b, ..., a]`` per strongly connected component of several modules."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def strongconnect(start: str) -> None:  # Tarjan's algorithm, iterative
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(component)

    for module in sorted(graph):
        if module not in index:
            strongconnect(module)
    return [_cycle_in(graph, component) for component in components]


def _cycle_in(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A shortest cycle through the first module (by name) of ``component``."""
    start = min(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(graph[node] & component):
                if child == start:
                    return [*paths[node], start]
                if child not in paths:
                    paths[child] = [*paths[node], child]
                    following.append(child)
        frontier = following
    raise AssertionError(f"no cycle through {start}")  # a component always has one


def _package_root() -> str:
    spec = importlib.util.find_spec(PACKAGE)
    assert spec is not None and spec.submodule_search_locations
    return spec.submodule_search_locations[0]


def test_the_import_graph_has_no_cycle():
    modules = package_modules(_package_root(), PACKAGE)
    graph = import_graph(modules)
    assert graph[f"{PACKAGE}.onnx"], "the facade imports nothing: the graph was not read"
    cycles = find_cycles(graph)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_the_graph_sees_function_imports_and_skips_type_checking(tmp_path):
    """The rule itself, on a small package: which imports make a cycle and which do not."""
    files = {
        "__init__.py": "from .a import f\n",
        "a.py": "from . import b\n\ndef f():\n    return b\n",
        "b.py": "def g():\n    from .c import h\n    return h\n",
        "c.py": "from .a import f\n",  # a -> b -> c -> a, through a function's import
        "d.py": (
            "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from .e import E\nelse:\n    from . import a\n"
        ),
        "e.py": "import pkg.d\n",  # d -> e only under TYPE_CHECKING: no cycle
    }
    root = tmp_path / "pkg"
    root.mkdir()
    for name, text in files.items():
        (root / name).write_text(text)
    graph = import_graph(package_modules(str(root), "pkg"))
    assert graph["pkg.d"] == {"pkg.a"} and graph["pkg.e"] == {"pkg.d"}
    assert graph["pkg.a"] == {"pkg.b"}  # its own package's __init__ is no edge
    assert find_cycles(graph) == [["pkg.a", "pkg.b", "pkg.c", "pkg.a"]]
    # what the modules name: d -> e under TYPE_CHECKING is an edge, and a circle
    named = import_graph(package_modules(str(root), "pkg"), type_checking=True)
    assert named["pkg.d"] == {"pkg.a", "pkg.e"}
    assert ["pkg.d", "pkg.e", "pkg.d"] in find_cycles(named)


_IMPORT_EACH = textwrap.dedent(
    """
    import importlib, json, sys, traceback

    failed = {}
    for name in sys.argv[1:]:
        for loaded in [m for m in sys.modules if m == "PACKAGE" or m.startswith("PACKAGE.")]:
            del sys.modules[loaded]
        try:
            importlib.import_module(name)
        except BaseException:
            failed[name] = traceback.format_exc(limit=-3)
    print(json.dumps(failed))
    """
).replace("PACKAGE", PACKAGE)


def test_each_module_imports_alone():
    """Each module imported first in a fresh interpreter (the package's modules unloaded
    between two, the other packages kept: numpy cannot be loaded twice in a process)."""
    names = [m for m in package_modules(_package_root(), PACKAGE) if not m.endswith("__main__")]
    proc = subprocess.run(
        [sys.executable, "-c", _IMPORT_EACH, *names],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    failed = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not failed, "\n".join(f"{name}:\n{error}" for name, error in failed.items())


WRITERS = {
    f"{PACKAGE}.onnx.{name}" for name in ("_io", "_align", "_save", "_dedup", "_edit", "_convert")
}


def test_no_writer_imports_another():
    """Each public verb sits beside its body; what two writers share lives below them
    (the planner, the targets, the one ending), never in one of them."""
    graph = import_graph(package_modules(_package_root(), PACKAGE))
    assert graph.keys() >= WRITERS, sorted(WRITERS - graph.keys())
    crossing = {
        w: sorted(graph[w] & (WRITERS - {w})) for w in sorted(WRITERS) if graph[w] & WRITERS
    }
    assert not crossing, f"writers importing writers: {crossing}"


def test_every_public_name_reports_the_facade():
    """Tracebacks and help() show onnx_light.onnx.ExternalDataError, not a private path;
    onnx's own objects keep theirs."""
    import onnx

    import onnx_light.onnx as onnxl

    for name in onnxl.__all__:
        obj = getattr(onnxl, name)
        if getattr(onnx, name, None) is obj or not callable(obj):
            continue  # onnx's protos and helper modules; constants (SHARD_NAMINGS)
        assert obj.__module__ == "onnx_light.onnx", name
    for error in (onnxl.ExternalDataError, onnxl.WireError, onnxl.TruncatedFileError):
        assert error.__module__ == "onnx_light.onnx"
    assert issubclass(onnxl.WireError, ValueError) and issubclass(onnxl.TruncatedFileError, OSError)


def test_every_private_module_declares_its_interface_first():
    """``__all__`` at the top of each private module: every name another module of the
    package imports from it, and only names it defines."""
    modules = package_modules(_package_root(), PACKAGE)
    imported: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        here = module if path.endswith("__init__.py") else module.rpartition(".")[0]
        for node in _imports(tree):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = here.rsplit(".", node.level - 1)[0] if node.level > 1 else here
                source = f"{base}.{node.module}" if node.module else base
            elif isinstance(node, ast.ImportFrom):
                source = node.module or ""
            else:
                continue
            if source in modules and source != module:
                imported[source] |= {
                    a.name for a in node.names if f"{source}.{a.name}" not in modules
                }
    for module, path in modules.items():
        if path.endswith("__init__.py") or not _is_private(module):
            continue  # a stage folder's __init__ is empty (test below)
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        body = [n for n in tree.body if not isinstance(n, (ast.Import, ast.ImportFrom))]
        body = body[1:] if body and isinstance(body[0], ast.Expr) else body  # the docstring
        first = body[0] if body else None
        assert isinstance(first, (ast.Assign, ast.AnnAssign)), f"{module}: __all__ is not first"
        target = first.targets[0] if isinstance(first, ast.Assign) else first.target
        assert getattr(target, "id", None) == "__all__", f"{module}: __all__ is not first"
        listed = {e.value for e in first.value.elts}
        defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))} | {
            t.id
            for n in tree.body
            if isinstance(n, ast.Assign)
            for t in n.targets
            if isinstance(t, ast.Name)
        }
        assert imported[module] <= listed, f"{module}: {sorted(imported[module] - listed)} missing"
        assert listed <= defined, f"{module}: {sorted(listed - defined)} not defined there"


def _is_private(module: str) -> bool:
    """A module of the engine: one of its names after the package is private."""
    return any(p.startswith("_") and not p.startswith("__") for p in module.split(".")[1:])


def test_stage_folders_have_empty_init_files():
    """A stage folder is only a folder: importing it runs nothing, re-exports nothing
    (a module is imported by the path where it lives)."""
    modules = package_modules(_package_root(), PACKAGE)
    folders = [m for m, p in modules.items() if p.endswith("__init__.py") and _is_private(m)]
    assert folders, "no stage folder found"
    for folder in folders:
        assert os.path.getsize(modules[folder]) == 0, f"{folder}/__init__.py is not empty"


# The engine's folders in the order they may import each other: a module imports only
# from its own folder and the ones before it. The settings, errors and dtypes are the base;
# the writers and the facade (onnx_light.onnx's own modules) sit on top.
STAGES = (
    "base",
    "_system",
    "_read",
    "_commit",
    "_plan",
    "_content",
    "_write",
    "_graph",
    "_inspect",
    "pipeline",
    "writers",
)
BASE = {f"{PACKAGE}.onnx._{name}" for name in ("errors", "options", "dtypes")}
PIPELINE = f"{PACKAGE}.onnx._pipeline"  # the stages every writer goes through
FOLDERS = STAGES[1:-2]  # the stage folders, between the base and the pipeline


def _stage(module: str) -> str | None:
    if module in BASE:
        return "base"
    if module == PIPELINE:
        return "pipeline"
    parts = module.split(".")
    if parts[:2] != [PACKAGE, "onnx"]:
        return None  # the CLI, the reports: outside the engine
    if len(parts) > 2 and parts[2] in FOLDERS:
        return parts[2]
    return "writers"


def test_the_stage_folders_import_in_order():
    """base -> _system -> _read -> _commit -> _plan -> _content, _write -> _graph ->
    _inspect -> the write pipeline (_pipeline.py) -> writers: no module imports from a later stage (_content and _write do not import
    each other), not even under ``if TYPE_CHECKING:``: an annotation naming a later
    stage's class is a dependency on that stage, one that running the code never
    shows."""
    graph = import_graph(package_modules(_package_root(), PACKAGE), type_checking=True)
    folders = {
        m.split(".")[2]
        for m in graph
        if m.startswith(f"{PACKAGE}.onnx._") and len(m.split(".")) > 3
    }
    assert folders == set(FOLDERS), sorted(folders)
    order = {stage: i for i, stage in enumerate(STAGES)}
    wrong = []
    for module, targets in sorted(graph.items()):
        stage = _stage(module)
        if stage is None:
            continue
        for target in sorted(targets):
            other = _stage(target)
            if other is None or other == stage:
                continue
            if order[other] > order[stage] or {stage, other} == {"_content", "_write"}:
                wrong.append(f"{module} ({stage}) imports {target} ({other})")
    assert not wrong, "\n".join(wrong)


def test_the_package_never_uses_the_benchmarks_harness():
    """The wheel holds the library only: no module of onnx_light imports the benchmarks'
    harness, nor shows it in an example (``benchmarks.harness`` lives in the checkout,
    beside the benchmarks; a user who installed the package does not have it)."""
    found = []
    for name, path in package_modules(_package_root(), PACKAGE).items():
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Import):
                imported = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                imported = [node.module or ""]
            else:
                continue
            if any(m == "benchmarks" or m.startswith("benchmarks.") for m in imported):
                found.append(f"{name}:{node.lineno}")
        found += [
            f"{name} (its text)"
            for word in ("benchmarks.harness", "onnx_light.bench")
            if word in text
        ]
    assert not found, found


def private_uses(modules: dict[str, str], facade: str, public: set[str]) -> list[str]:
    """Where a module outside ``facade``'s package reaches past its public names.

    Every module whose name does not start with ``facade`` is read (imports inside
    functions and under ``if TYPE_CHECKING:`` included): an import of a module below
    the facade other than a public one (``facade._read.scan``), ``from facade import
    x`` with ``x`` not in ``public``, and an attribute ``facade.x`` (through any name
    the module bound to it: ``import facade as f``, then ``f._io``) are reported, as
    ``module:line what``.
    """
    found = []
    for module, path in sorted(modules.items()):
        if module == facade or module.startswith(facade + "."):
            continue  # the engine itself
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        here = module if path.endswith("__init__.py") else module.rpartition(".")[0]
        bound: dict[str, str] = {}  # a name of this module -> the module it names

        def check(dotted: str, line: int, module=module) -> None:
            if dotted.startswith(facade + "."):
                name = dotted[len(facade) + 1 :].split(".")[0]
                if name not in public:
                    found.append(f"{module}:{line} {facade}.{name}")

        for node in _imports(tree, type_checking=True):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    check(alias.name, node.lineno)
                    if alias.asname:
                        bound[alias.asname] = alias.name
                    else:
                        bound[alias.name.split(".")[0]] = alias.name.split(".")[0]
                continue
            if node.level:
                base = here.rsplit(".", node.level - 1)[0] if node.level > 1 else here
                source = f"{base}.{node.module}" if node.module else base
            else:
                source = node.module or ""
            check(source, node.lineno)
            for alias in node.names:
                check(f"{source}.{alias.name}", node.lineno)
                bound[alias.asname or alias.name] = f"{source}.{alias.name}"
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute):
                continue
            parts, root = [node.attr], node.value
            while isinstance(root, ast.Attribute):
                parts.append(root.attr)
                root = root.value
            if isinstance(root, ast.Name) and root.id in bound:
                check(".".join([bound[root.id], *reversed(parts)]), node.lineno)
    return sorted(set(found))


def test_outside_the_engine_only_public_names_are_used():
    """Whatever the command line needs, a user's script needs too: every module of
    onnx_light outside onnx_light.onnx (the CLI, ``python -m onnx_light``, the entry
    point, the progress bar) uses only public names of onnx_light.onnx, not a private
    module or attribute (info and verify included: what they print is the objects of
    inspect_models and verify_models)."""
    import onnx_light.onnx as onnxl

    modules = package_modules(_package_root(), PACKAGE)
    outside = [m for m in modules if not m.startswith(f"{PACKAGE}.onnx")]
    assert {f"{PACKAGE}.cli", f"{PACKAGE}.__main__", f"{PACKAGE}._progress"} <= set(outside)
    found = private_uses(modules, f"{PACKAGE}.onnx", set(onnxl.__all__))
    assert not found, "private names used outside the engine:\n" + "\n".join(found)


def test_private_uses_sees_every_way_in(tmp_path):
    """The rule itself, on a small package: each way past the facade is reported."""
    files = {
        "__init__.py": "",
        "eng/__init__.py": "from ._x import f\n__all__ = ['f']\n",
        "eng/_x.py": "def f():\n    pass\n\ndef g():\n    pass\n",
        "ok.py": "import pkg.eng as e\nfrom pkg.eng import f\ne.f()\n",
        "a.py": "from pkg.eng._x import g\n",
        "b.py": "from pkg.eng import g\n",
        "c.py": "import pkg.eng as e\ne._x.g()\n",
        "d.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .eng._x import g\n",
        "e.py": "def h():\n    import pkg.eng._x\n",
    }
    root = tmp_path / "pkg"
    for name, body in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(body)
    found = private_uses(package_modules(str(root), "pkg"), "pkg.eng", {"f"})
    assert found == [
        "pkg.a:1 pkg.eng._x",
        "pkg.b:1 pkg.eng.g",
        "pkg.c:2 pkg.eng._x",
        "pkg.d:3 pkg.eng._x",
        "pkg.e:2 pkg.eng._x",
    ]


def test_the_engine_page_lists_every_module():
    """The design page says what the code has: every module of onnx_light.onnx is in
    engine.rst's table (a new module without a line there fails here)."""
    root = os.path.join(os.path.dirname(__file__), "..")
    with open(os.path.join(root, "_doc", "design", "engine.rst"), encoding="utf-8") as f:
        page = f.read()
    folder = os.path.join(_package_root(), "onnx")
    files = [
        os.path.relpath(os.path.join(d, n), folder).replace(os.sep, "/")
        for d, _, names in os.walk(folder)
        for n in names
        if n.endswith(".py") and not (n == "__init__.py" and d != folder)
    ]
    assert len(files) > 30, files
    missing = sorted(f for f in files if f"``{f}``" not in page)
    assert not missing, f"engine.rst does not list {missing}"

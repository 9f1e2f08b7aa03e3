"""Nothing in the library, the benchmarks, the examples or CI changes the machine's settings.

A measurement must not change the machine it measures, and ``make bench-smoke``
runs in CI: no kernel parameter written (``/sys``, ``/proc/sys``), no state left
in ``/run``, no page cache dropped as a whole (``drop_caches``). A cold
measurement evicts only the files it made (``posix_fadvise``), and the
filesystem images are the harness's own loop files, mounted on its own folders.

The search reads the code, not its text: in Python, a path under those folders
(a string, or a name or attribute assigned from one, in the same module) that
reaches a call that writes (``open`` with a writing mode, ``os.open`` with a
writing flag, ``os.mkdir``, ``os.remove``..., ``Path.write_text``..., a command
run with it), directly or through a function of the module whose parameter
does; any call of a function named ``drop_caches``; a shell redirection,
``tee`` or ``sysctl -w`` onto those folders in a command (a command string of
Python, ``Makefile``, ``.ci/``). Python code held in a string (a child
process's ``-c`` script) is read too. Reading those folders is fine (the
engine reads its cgroup's limit, the kernel profile reads
``perf_event_paranoid``), and so is a docstring that names them.

One exception, named below (``ALLOWED``, ``MAKES_A_CGROUP``): a memory cgroup
folder of its own under ``/sys/fs/cgroup``, made for one measurement, limited, and
removed after (``benchmarks/cgroup.py``'s ``MemoryCgroup``); it limits only the
processes put in it, and no setting of the machine's cgroups is written. Only
code reached by ``benchmarks/run.py --cgroup`` makes one (the ``cgroup`` rows,
as root), and the proofs that measure in such a cgroup
(``benchmarks/proofs/window_sync.py``, and ``benchmarks/proofs/quantize_memory.py``
with ``--cgroup``: run by hand as root). Everything
``make bench`` and ``make bench-smoke`` run by default writes nothing under
``/sys``, ``/proc/sys`` or ``/run``: without ``--cgroup`` the suite selects no
cgroup row, refuses one named with ``--only``, and its cold measurement refuses
to make a cgroup.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Iterator

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCANNED = ("onnx_light", "benchmarks", "examples", "Makefile", ".ci")

SYSTEM = re.compile(r"^/(?:sys|proc/sys|run|var/run)(?:/|$)")
_SYS = r"/(?:sys|proc/sys|run|var/run)/"
SHELL = re.compile(
    rf">>?\s*{_SYS}"  # echo 3 > /proc/sys/vm/drop_caches
    rf"|\btee\b[^|;&\n]*\s{_SYS}"  # ... | tee /sys/...
    r"|\bsysctl\b[^|;&\n]*(?:\s-w\b|=)"  # sysctl -w vm.x=1
    r"|\bdrop_caches\b"
)
WRITE_MODES = set("wax+")
WRITE_FLAGS = {"O_WRONLY", "O_RDWR", "O_CREAT", "O_TRUNC", "O_APPEND"}
PATH_CHANGES = {
    "os.mkdir",
    "os.makedirs",
    "os.rmdir",
    "os.removedirs",
    "os.remove",
    "os.unlink",
    "os.rename",
    "os.renames",
    "os.replace",
    "os.symlink",
    "os.link",
    "os.chmod",
    "os.chown",
    "os.truncate",
    "os.utime",
    "os.mknod",
    "os.mkfifo",
    "shutil.rmtree",
    "shutil.copy",
    "shutil.copy2",
    "shutil.copyfile",
    "shutil.copytree",
    "shutil.move",
}
PATH_METHODS = {
    "write_text",
    "write_bytes",
    "mkdir",
    "touch",
    "unlink",
    "rmdir",
    "rename",
    "replace",
    "chmod",
    "symlink_to",
}
COMMANDS = {
    "os.system",
    "os.popen",
    "subprocess.run",
    "subprocess.call",
    "subprocess.check_call",
    "subprocess.check_output",
    "subprocess.Popen",
}

# (file, function, call): the benchmarks' own memory cgroup, made, written and removed
# (only by the callers of MAKES_A_CGROUP below)
ALLOWED = {
    ("benchmarks/cgroup.py", "MemoryCgroup.__enter__", "os.mkdir"),
    ("benchmarks/cgroup.py", "MemoryCgroup.__enter__", "os.rmdir"),
    ("benchmarks/cgroup.py", "MemoryCgroup._write", "open"),
    ("benchmarks/cgroup.py", "MemoryCgroup.__exit__", "os.rmdir"),
}


# (file, function): the only code that makes such a cgroup (MemoryCgroup(...)): the cold
# measurement of benchmarks/run.py, for the cgroup rows only, with --cgroup; the proofs that
# measure in a cgroup, run by hand as root
MAKES_A_CGROUP = {
    ("benchmarks/run.py", "measure_cold"),
    ("benchmarks/proofs/window_sync.py", "_measure"),
    # the quantizer's memory proof, with its --cgroup option only
    ("benchmarks/proofs/quantize_memory.py", "measure_cgroup"),
}


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


class _Module:
    """One Python module: which names and attributes hold a system path, and where
    such a path is written."""

    def __init__(self, tree: ast.Module, where: str) -> None:
        self.where = where
        self.body = tree.body
        self.attrs: set[str] = set()  # self.x / cls.x assigned a system path (self.path = ...)
        self.writers: dict[str, set[int | str]] = {}  # function -> parameters it writes
        self.defs = [
            n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
        ]
        self.qual = {
            item: f"{node.name}.{item.name}"
            for node in ast.walk(tree)
            if isinstance(node, ast.ClassDef)
            for item in node.body
            if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
        }
        # names and attributes: the module's, then each function's (flow-insensitive)
        while True:
            before = len(self.attrs)
            self.names = self._taint(self.body, set(), self.attrs)
            self.local = {fn: self._taint(fn.body, self.names, self.attrs) for fn in self.defs}
            if len(self.attrs) == before:
                break
        while True:  # the functions that write a path given as a parameter
            changed = False
            for fn in self.defs:
                params = [a.arg for a in (*fn.args.posonlyargs, *fn.args.args)]
                without = len(self._sinks(fn.body, self.local[fn]))
                for i, param in enumerate(params):
                    if param in ("self", "cls") or i in self.writers.get(fn.name, ()):
                        continue
                    # a copy of the attributes: a parameter's taint stays in its function
                    names = self._taint(fn.body, self.local[fn] | {param}, set(self.attrs))
                    if len(self._sinks(fn.body, names)) > without:
                        self.writers.setdefault(fn.name, set()).update((i, param))
                        changed = True
            if not changed:
                break

    # -- what holds a system path ------------------------------------------------

    def _tainted(
        self, node: ast.AST | None, names: set[str], attrs: set[str] | None = None
    ) -> bool:
        attrs = self.attrs if attrs is None else attrs
        if node is None:
            return False
        if isinstance(node, ast.Constant):
            return isinstance(node.value, str) and bool(SYSTEM.match(node.value))
        if isinstance(node, ast.JoinedStr):  # only a leading constant makes a path
            head = node.values[0] if node.values else None
            return isinstance(head, ast.Constant) and self._tainted(head, names, attrs)
        if isinstance(node, ast.Name):
            return node.id in names
        if _own(node) and node.attr in attrs:
            return True
        return any(self._tainted(c, names, attrs) for c in ast.iter_child_nodes(node))

    def _taint(self, body: list[ast.stmt], names: set[str], attrs: set[str]) -> set[str]:
        """``names`` and every name assigned a system path in ``body`` (not in nested
        functions); attributes so assigned are added to ``attrs``."""
        names = set(names)
        nodes = list(_walk_scope(body))
        while True:
            before = (len(names), len(attrs))
            for node in nodes:
                if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign | ast.NamedExpr):
                    value, targets = node.value, getattr(node, "targets", None) or [node.target]
                elif isinstance(node, ast.For | ast.comprehension):
                    value, targets = node.iter, [node.target]
                elif isinstance(node, ast.withitem) and node.optional_vars is not None:
                    value, targets = node.context_expr, [node.optional_vars]
                else:
                    continue
                if value is None or not self._tainted(value, names, attrs):
                    continue
                for target in targets:
                    for t in ast.walk(target):
                        if isinstance(t, ast.Name):
                            names.add(t.id)
                        elif _own(t):
                            attrs.add(t.attr)
            if (len(names), len(attrs)) == before:
                return names

    # -- where it is written -----------------------------------------------------

    def _sinks(self, body: list[ast.stmt], names: set[str]) -> list[tuple[ast.Call, str]]:
        found = []
        for node in _walk_scope(body):
            if isinstance(node, ast.Call):
                why = self._writes(node, names)
                if why:
                    found.append((node, why))
        return found

    def _writes(self, call: ast.Call, names: set[str]) -> str | None:
        """The call's name when it writes a system path (or drops the caches)."""
        name = _dotted(call.func)
        short = name.rsplit(".", 1)[-1]
        args = [*call.args, *(k.value for k in call.keywords)]
        if short == "drop_caches":
            return name
        if name in ("open", "io.open", "builtins.open"):
            path = call.args[0] if call.args else _keyword(call, "file")
            mode = call.args[1] if len(call.args) > 1 else _keyword(call, "mode")
            writing = mode is not None and not (
                isinstance(mode, ast.Constant)
                and isinstance(mode.value, str)
                and not WRITE_MODES & set(mode.value)
            )
            return "open" if writing and self._tainted(path, names) else None
        if name == "os.open":
            flags = call.args[1] if len(call.args) > 1 else _keyword(call, "flags")
            writing = flags is not None and any(
                _dotted(n).rsplit(".", 1)[-1] in WRITE_FLAGS for n in ast.walk(flags)
            )
            return name if writing and self._tainted(call.args[0], names) else None
        if name in PATH_CHANGES:
            return name if any(self._tainted(a, names) for a in args) else None
        if isinstance(call.func, ast.Attribute) and short in PATH_METHODS:
            return name if self._tainted(call.func.value, names) else None
        if isinstance(call.func, ast.Attribute) and short == "open":  # Path(...).open("w")
            mode = call.args[0] if call.args else _keyword(call, "mode")
            writing = isinstance(mode, ast.Constant) and WRITE_MODES & set(str(mode.value))
            return name if writing and self._tainted(call.func.value, names) else None
        if name in COMMANDS:
            return name if self._command_writes(call, args, names) else None
        params = self.writers.get(short)
        if params:
            method = isinstance(call.func, ast.Attribute) and any(
                fn.name == short and fn in self.qual for fn in self.defs
            )
            offset = 1 if method else 0
            for i, a in enumerate(call.args):
                if i + offset in params and self._tainted(a, names):
                    return name
            for k in call.keywords:
                if k.arg in params and self._tainted(k.value, names):
                    return name
        return None

    def _command_writes(self, call: ast.Call, args: list[ast.expr], names: set[str]) -> bool:
        """A command given a system path, a shell line writing one, or ``sysctl``."""
        if any(self._tainted(a, names) for a in args):
            return True
        strings = [
            n.value
            for a in args
            for n in ast.walk(a)
            if isinstance(n, ast.Constant) and isinstance(n.value, str)
        ]
        if any(SHELL.search(s) for s in strings):
            return True
        first = call.args[0] if call.args else None
        return (
            isinstance(first, ast.List | ast.Tuple)
            and bool(first.elts)
            and isinstance(first.elts[0], ast.Constant)
            and first.elts[0].value == "sysctl"
        )

    def findings(self) -> Iterator[tuple[str, str, str, int]]:
        """(file, function, call, line) of each write."""
        for node, why in self._sinks(self.body, self.names):
            yield self.where, "<module>", why, node.lineno
        for fn in self.defs:
            for node, why in self._sinks(fn.body, self.local[fn]):
                yield self.where, self.qual.get(fn, fn.name), why, node.lineno


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _own(node: ast.AST) -> bool:
    """``self.x`` or ``cls.x``: an attribute of the instance or class."""
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id in ("self", "cls")
    )


def _walk_scope(body: list[ast.stmt]) -> Iterator[ast.AST]:
    """Every node of ``body``, not entering nested functions or classes."""
    nested = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    todo = [node for node in body if not isinstance(node, nested)]
    while todo:
        node = todo.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, nested):
                todo.append(child)


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def python_findings(source: str, where: str) -> list[tuple[str, str, str, int]]:
    """The writes to system paths of one Python file (and of the code its strings hold)."""
    tree = ast.parse(source)
    found = list(_Module(tree, where).findings())
    docs = _docstrings(tree)
    for node in ast.walk(tree):  # a child process's script, held in a string
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docs
            and "\n" in node.value
            and "import " in node.value
        ):
            try:
                inner = ast.parse(node.value)
            except SyntaxError:
                continue
            if any(isinstance(n, ast.Import | ast.ImportFrom) for n in ast.walk(inner)):
                found += [
                    (w, f"<script at line {node.lineno}>", why, line)
                    for w, _, why, line in python_findings(node.value, where)
                ]
    return found


def shell_findings(text: str, where: str) -> list[tuple[str, str, str, int]]:
    """Redirections, ``tee`` or ``sysctl -w`` onto system paths, or ``drop_caches``, in a
    Makefile or a shell script (comments skipped)."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        code = line.split("#", 1)[0] if not line.lstrip().startswith("#") else ""
        match = SHELL.search(code)
        if match:
            found.append((where, "<shell>", match.group(0).strip(), number))
    return found


def tree_findings(root: str) -> list[tuple[str, str, str, int]]:
    """Every write to a system path in the scanned part of the tree at ``root``."""
    found = []
    for top in SCANNED:
        path = os.path.join(root, top)
        if os.path.isfile(path):
            files = [path]
        else:
            files = []
            for folder, dirs, names in os.walk(path):
                dirs[:] = sorted(d for d in dirs if d not in ("__pycache__", "results"))
                files += [os.path.join(folder, n) for n in sorted(names)]
        for file in files:
            rel = os.path.relpath(file, root).replace(os.sep, "/")
            with open(file, encoding="utf-8", errors="replace") as f:
                text = f.read()
            if file.endswith(".py"):
                found += python_findings(text, rel)
            elif top in ("Makefile", ".ci") or file.endswith((".sh", ".mk")):
                found += shell_findings(text, rel)
    return found


def test_nothing_writes_the_machines_settings():
    unexpected = [f for f in tree_findings(ROOT) if f[:3] not in ALLOWED]
    assert not unexpected, "writes to /sys, /proc/sys, /run or a page cache drop:\n" + "\n".join(
        f"  {where}:{line} in {fn}: {call}" for where, fn, call, line in unexpected
    )


# -- the one exception: a cgroup of its own, with --cgroup only -------------------


def cgroup_makers(root: str) -> set[tuple[str, str]]:
    """(file, function) of every call of ``MemoryCgroup`` in the scanned Python code."""
    found = set()
    for top in SCANNED:
        for folder, dirs, names in os.walk(os.path.join(root, top)):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(n for n in names if n.endswith(".py")):
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as f:
                    tree = ast.parse(f.read())
                rel = os.path.relpath(path, root).replace(os.sep, "/")
                for fn in ast.walk(tree):
                    if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                        continue
                    for node in _walk_scope(fn.body):
                        if isinstance(node, ast.Call) and _dotted(node.func).endswith(
                            "MemoryCgroup"
                        ):
                            found.add((rel, fn.name))
    return found


def test_only_the_cgroup_option_and_its_proof_make_a_cgroup():
    assert cgroup_makers(ROOT) == MAKES_A_CGROUP


@pytest.fixture
def run(monkeypatch):
    """``benchmarks/run.py`` (the suite's modules import each other by plain name)."""
    monkeypatch.syspath_prepend(os.path.join(ROOT, "benchmarks"))
    import run

    return run


@pytest.mark.parametrize("argv", [[], ["--smoke"], ["--only", "cold,durable,readahead"]])
def test_make_bench_and_bench_smoke_select_no_cgroup_row(run, argv):
    """``make bench`` and ``make bench-smoke`` (no ``--cgroup``): no operation of the
    plan runs in a cgroup, so nothing is made under /sys/fs/cgroup."""
    args = run.parse_args(argv)
    ops = [op for _, ops in run.plan(args.groups, args.sizes_of) for op in ops]
    assert ops and not [op for op in ops if run.condition(op) == "cgroup"]


def test_cgroup_rows_need_the_option(run, capsys):
    with pytest.raises(SystemExit):
        run.parse_args(["--only", "cold,cgroup"])
    assert "add --cgroup" in capsys.readouterr().err
    args = run.parse_args(["--cgroup", "--smoke"])
    ops = [op for _, ops in run.plan(args.groups, args.sizes_of) for op in ops]
    assert "cg_align" in ops
    args = run.parse_args(["--only", "cgroup", "--cgroup"])
    assert args.groups == ["cgroup"]


def test_a_cold_measurement_makes_no_cgroup_without_the_option(run, monkeypatch):
    """Even handed a cgroup row, the cold measurement refuses before it touches anything."""
    made = []
    monkeypatch.setattr(run.cgroup, "MemoryCgroup", lambda *a: made.append(a))
    monkeypatch.setattr(run.os, "sync", lambda: made.append("sync"))
    args = run.parse_args(["--smoke"])
    with pytest.raises(RuntimeError, match="only with --cgroup"):
        run.measure_cold(args, "cg_align", "/nonexistent", "2MiB")
    assert made == []


def test_the_makefile_asks_for_no_cgroup():
    with open(os.path.join(ROOT, "Makefile"), encoding="utf-8") as f:
        recipes = [ln for ln in f.read().splitlines() if ln.startswith("\t")]
    assert not [ln for ln in recipes if "--cgroup" in ln]


# -- the search finds what it is for ---------------------------------------------

FOUND = {
    "a kernel parameter, through a helper": """
PAGE_REPORTING = "/sys/module/page_reporting/parameters/min_free_ms"
def _write(path, value):
    with open(path, "w") as f:
        f.write(value)
def hold():
    _write(PAGE_REPORTING, "300000")
""",
    "a state file in /run, removed": """
import os
STATE = "/run/onnx_light_page_reporting.json"
def restore():
    os.remove(STATE)
""",
    "the page cache dropped": """
def drop_caches():
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\\n")
""",
    "a call of drop_caches elsewhere": """
import cgroup
cgroup.drop_caches()
""",
    "a settings file written through a joined path": """
import os
FS = "/sys/fs/cgroup"
with open(os.path.join(FS, "cgroup.subtree_control"), "w") as f:
    f.write("+memory")
""",
    "a loop over settings": """
A, B = "/sys/a", "/sys/b"
def put(path, value):
    open(path, "a").write(value)
for path, value in ((A, "1"), (B, "2")):
    put(path, value)
""",
    "a path object": """
from pathlib import Path
Path("/proc/sys/vm/swappiness").write_text("10")
""",
    "os.open with a writing flag": """
import os
fd = os.open("/sys/kernel/mm/transparent_hugepage/enabled", os.O_WRONLY)
""",
    "a shell command": """
import subprocess
subprocess.run("sync; echo 3 > /proc/sys/vm/drop_caches", shell=True)
""",
    "sysctl": """
import subprocess
subprocess.run(["sysctl", "-w", "vm.drop_caches=3"])
""",
    "a child's script": '''
import subprocess, sys
CHILD = """
import os
with open("/proc/sys/vm/drop_caches", "w") as f:
    f.write("1")
"""
subprocess.run([sys.executable, "-c", CHILD])
''',
}

NOT_FOUND = {
    "a read of the cgroup's limit": """
import os
base = os.path.join("/sys/fs/cgroup", "memory")
with open(os.path.join(base, "memory.limit_in_bytes")) as f:
    limit = int(f.read())
""",
    "a read with an explicit mode": """
with open("/proc/sys/kernel/perf_event_paranoid", "r") as f:
    paranoid = int(f.read())
""",
    "the process's own peak reset": """
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
""",
    "a docstring and a message that name the folders": '''
def evict(paths):
    """Unlike echo 3 > /proc/sys/vm/drop_caches, only these files."""
    print("no /sys/fs/cgroup here")
''',
    "a loop image mounted on its own folder": """
import subprocess, tempfile
mnt = tempfile.mkdtemp()
subprocess.run(["mount", "/dev/loop0", mnt])
""",
    "a folder of the temp dir": """
import os
os.makedirs(os.path.join("/tmp", "runs"))
""",
}


@pytest.mark.parametrize("source", FOUND.values(), ids=FOUND.keys())
def test_search_finds_a_write(source):
    assert python_findings(source, "x.py")


@pytest.mark.parametrize("source", NOT_FOUND.values(), ids=NOT_FOUND.keys())
def test_search_leaves_reads_alone(source):
    assert python_findings(source, "x.py") == []


@pytest.mark.parametrize(
    "line, found",
    [
        ("\tsync && echo 3 > /proc/sys/vm/drop_caches", True),
        ("\techo 0 | sudo tee /sys/module/page_reporting/parameters/min_free_ms", True),
        ("\tsysctl -w vm.swappiness=10", True),
        ("\t$(PY) benchmarks/run.py --smoke  # never echo > /sys", False),
        ("\tcat /sys/fs/cgroup/memory.max", False),
    ],
)
def test_search_reads_shell_lines(line, found):
    assert bool(shell_findings(line, "Makefile")) is found

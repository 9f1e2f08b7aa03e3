"""What the published pages say is true of the code, of the report and of onnx.

One guard per class of false sentence, run over every published text: the
prose of ``_doc/*.rst`` and ``_doc/*/*.rst`` (code blocks removed), the text
cells of the gallery scripts (their docstring and the comments that follow a
``# %%``) and the docstrings of ``onnx_light.onnx`` and ``onnx_light.cli``
(the API pages):

- **no page names an internal issue** ("issue 12", "(issue 19)"): a reader
  cannot open them. A project's own issue is linked (``onnx#6226
  <https://...>``), never written so;
- **count words match the code**: "N writers" (the public writer functions,
  one per writer module), "N scenarios" (the scenarios page's sections),
  "N how-tos" (the how-to toctree), "N verbs", "subcommands" or "commands"
  (the ``onnx-light`` parser), "N streaming helpers" (the API page's section
  of that name);
- **numbers of the report come from the build**: a paragraph that cites the
  benchmark report (``make bench``, the benchmarks page, a ``:bench:`` role)
  states no literal figure the committed reports of that page also hold
  (``benchmarks/results/latest.csv``, ``cold.csv``, ``dedup.csv``, ``quantize.csv``): the
  report's figure rounded as the prose writes it, or an integer off by one
  (485 MiB for 484.0). Sizes (a power of two, or three times one: 96 MiB,
  4 GiB) and the reports' targets are parameters, not measurements. Such a
  number is quoted with ``:bench:``;
- **numbers of the proof reports come from the build**: a text that names a
  proof script or its report (``ort_alignment``, ``convert_proof``,
  ``threads_proof``, ``dedup_proof``, ``edit_proof``, ``peer_settings``,
  ``load_ab``, ``tensor_cost``, ``window_sync``, ``cold_proof``, ``ort_prepacking``, ``quantize_memory``,
  ``quantize_proof``:
  ``benchmarks/proofs/results/NAME.md``, indexed in ``benchmarks/proofs/README.md``) states none of that report's figures (its
  tables' cells, with their column's unit, and its prose). Such a number is quoted with
  ``:report:`` (``_doc/conf.py``).

Each guard is also run on a sentence with its defect, and must catch it.
Last, what the pages say of onnx's own save, reproduced.
"""

from __future__ import annotations

import argparse
import ast
import csv
import glob
import inspect
import os
import re

import numpy as np
import onnx
import pytest

import onnx_light.onnx as onnxl
from benchmarks.harness import make_gemm_model, weights_nbytes
from onnx_light.cli import build_parser

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
RESULTS = os.path.join(ROOT, "benchmarks", "results")  # make bench's reports
PROOF_RESULTS = os.path.join(ROOT, "benchmarks", "proofs", "results")  # the proofs' reports
REPORTS = ("latest", "cold", "dedup", "quantize")  # the reports the benchmarks page shows

# -- the published texts ---------------------------------------------------------


def rst_prose(text: str) -> str:
    """The prose of a reStructuredText page: code blocks, literal blocks and the
    contents of directives that hold code (code-block, the command's help) removed;
    ``code-block:: text`` listings (the rooms of the code) stay, as words."""
    out, skip_indent = [], None
    for line in text.split("\n"):
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if skip_indent is not None:
            if not stripped or indent > skip_indent:
                continue
            skip_indent = None
        if stripped in (".. code-block:: text", ".. code-block:: none"):
            continue  # a listing in words (the rooms of the code): read as prose
        if re.match(
            r"\.\. (code-block|code|literalinclude|onnx-light-help|automodule)::", stripped
        ):
            skip_indent = indent
            continue
        if stripped.endswith("::") and not stripped.startswith(".."):
            out.append(stripped[:-1])  # "text::" renders "text:", then a literal block
            skip_indent = indent
            continue
        out.append(line)
    return "\n".join(out)


def gallery_text(source: str) -> str:
    """The text cells of a sphinx-gallery script: its docstring and the comment
    blocks that follow each ``# %%``."""
    parts = [ast.get_docstring(ast.parse(source)) or ""]
    in_cell = False
    for line in source.split("\n"):
        if line.startswith("# %%"):
            in_cell = True
            parts.append("")
            continue
        if in_cell and (line.startswith("# ") or line == "#"):
            parts[-1] += line[2:] + "\n"
        else:
            in_cell = False
    return "\n\n".join(parts)


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def docstrings(path: str) -> str:
    """The docstrings the API pages render: the module's, and those of the classes
    and functions it exports (its ``__all__``), with their methods."""
    tree = ast.parse(_read(path))
    exported = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            exported = set(ast.literal_eval(node.value))
    nodes = [tree]
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name in exported:
            nodes += [n for n in ast.walk(node) if isinstance(n, ast.FunctionDef | ast.ClassDef)]
    return "\n\n".join(ast.get_docstring(n) or "" for n in nodes)


def published() -> dict[str, str]:
    """Name -> the text a reader sees (close enough: prose, not code)."""
    texts = {}
    pages = glob.glob(os.path.join(ROOT, "_doc", "*.rst")) + glob.glob(
        os.path.join(ROOT, "_doc", "*", "*.rst")
    )
    for path in sorted(pages):
        rel = os.path.relpath(path, ROOT)
        if rel.startswith(os.path.join("_doc", "auto_examples")):
            continue  # generated from the scripts, read below
        texts[rel] = rst_prose(_read(path))
    for path in sorted(glob.glob(os.path.join(ROOT, "examples", "*", "plot_*.py"))):
        texts[os.path.relpath(path, ROOT)] = gallery_text(_read(path))
    for folder in ("onnx", "cli"):
        for path in sorted(glob.glob(os.path.join(ROOT, "onnx_light", folder, "*.py"))):
            texts[os.path.relpath(path, ROOT)] = docstrings(path)
    return texts


def line_of(text: str, pos: int) -> str:
    start = text.rfind("\n", 0, pos) + 1
    end = text.find("\n", pos)
    return text[start : end if end >= 0 else None].strip()


# -- no internal issue ----------------------------------------------------------------

ISSUE = re.compile(r"\bissues?\s*#?\s*\d+", re.IGNORECASE)


def internal_issues(text: str) -> list[str]:
    """The places where a text names an issue by its number alone."""
    return [line_of(text, m.start()) for m in ISSUE.finditer(text)]


# -- count words ----------------------------------------------------------------------

_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")
NUMBERS = {w: i for i, w in enumerate(_WORDS)}
_NUMBER = r"(\d+|" + "|".join(NUMBERS) + r")"


def public_writers() -> set[str]:
    """The writers: the modules beside the facade that hold a public function of
    ``onnx_light.onnx`` (``load`` and ``save`` share one), the setting check aside;
    the reports of ``_inspect/`` (``inspect_model``, ``verify_model``) write nothing."""
    files = set()
    facade = os.path.dirname(inspect.getsourcefile(onnxl))
    for name in onnxl.__all__:
        obj = getattr(onnxl, name)
        if inspect.isfunction(obj) and name != "check_setting":
            source = inspect.getsourcefile(obj)
            if os.path.dirname(source) == facade:
                files.add(os.path.basename(source))
    return files


def scenarios() -> list[str]:
    text = _read(os.path.join(ROOT, "_doc", "design", "scenarios.rst"))
    return re.findall(r"^Scenario \d+: .*\n-+$", text, re.MULTILINE)


def howtos() -> list[str]:
    text = _read(os.path.join(ROOT, "_doc", "howto", "index.rst"))
    body = text.split(".. toctree::", 1)[1]
    return [ln.strip() for ln in body.split("\n") if ln.startswith("   ") and ":" not in ln]


def subcommands() -> list[str]:
    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            return list(action.choices)
    return []


def streaming_helpers() -> list[str]:
    text = _read(os.path.join(ROOT, "_doc", "api", "onnx.rst"))
    section = text.split("Streaming helpers\n-----------------\n", 1)[1].split("\n---", 1)[0]
    return re.findall(r"^\.\. autofunction:: (\S+)", section, re.MULTILINE)


COUNTED = {
    r"(?:public )?writers": lambda: len(public_writers()),
    r"scenarios": lambda: len(scenarios()),
    r"how-tos|how-to guides|how-to pages": lambda: len(howtos()),
    r"verbs|subcommands|commands": lambda: len(subcommands()),
    r"(?:streaming )?helpers": lambda: len(streaming_helpers()),
}


def wrong_counts(text: str) -> list[str]:
    """Count words next to what they count ("three writers") that the code contradicts."""
    found = []
    for noun, count in COUNTED.items():
        pattern = rf"(?<![:\w-]){_NUMBER}(?:[ \t]+|[ \t]*\n[ \t]*)(?:{noun})\b"
        for m in re.finditer(pattern, text, re.IGNORECASE):
            word = m.group(1).lower()
            said = int(word) if word.isdigit() else NUMBERS[word]
            if said != count():
                found.append(f"{line_of(text, m.start())!r}: {said}, the code has {count()}")
    return found


# -- figures of the report ------------------------------------------------------------

CITES_REPORT = re.compile(r"make bench|l-benchmarks|:bench:`|benchmarks/results/latest")
FIGURE = re.compile(r"(?<![\w.,-])(\d[\d,]*(?:\.\d+)?)\s?(s|MiB|GiB|x)\b")
ROLE = re.compile(r":\w+:`[^`]*`")


def report_figures() -> dict[str, list[float]]:
    """The measured figures of the committed reports, by unit (seconds, MiB, ratios),
    and their targets (under "target")."""
    figures: dict[str, list[float]] = {"s": [], "MiB": [], "x": [], "target": []}
    for report in REPORTS:
        with open(os.path.join(RESULTS, f"{report}.csv"), newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
        for row in rows:
            for cell in (row["value"], row["ref value"]):
                m = re.fullmatch(r"([\d.]+) (s|MiB)", cell)
                if m:
                    figures[m.group(2)].append(float(m.group(1)))
            if row["ratio_raw"]:
                figures["x"].append(float(row["ratio_raw"]))
            m = re.search(r"([\d.]+)", row["target"])
            if m:
                figures["target"].append(float(m.group(1)))
    return figures


def _is_size(value: float) -> bool:
    """A power of two, or three times one (96, 192): a size or a limit, not a measure."""
    if value != int(value) or value < 1:
        return False
    n = int(value)
    return n & (n - 1) == 0 or (n % 3 == 0 and (n // 3) & (n // 3 - 1) == 0)


def literal_report_figures(text: str, figures: dict[str, list[float]]) -> list[str]:
    """Figures of the report written by hand in the paragraphs that cite it."""
    found = []
    for paragraph in re.split(r"\n\s*\n", text):
        if not CITES_REPORT.search(paragraph):
            continue
        prose = ROLE.sub(" ", paragraph)
        for m in FIGURE.finditer(prose):
            digits, unit = m.group(1).replace(",", ""), m.group(2)
            value = float(digits)
            if _is_size(value) or value in figures["target"]:
                continue
            decimals = len(digits.partition(".")[2])
            # the report's figure rounded as the prose writes it, or an integer off by one
            step = 10.0**-decimals * (0.5 if decimals else 1.0)
            if unit == "GiB":
                unit, value, step = "MiB", value * 1024, step * 1024
            if any(abs(value - v) <= step * (1 + 1e-9) for v in figures[unit]):
                found.append(f"{m.group(0)!r} in {line_of(prose, m.start())!r}")
    return found


# -- the guards, on the published texts ------------------------------------------------


def test_no_published_page_names_an_internal_issue():
    bad = {name: internal_issues(text) for name, text in published().items()}
    assert not {k: v for k, v in bad.items() if v}, {k: v for k, v in bad.items() if v}


def test_count_words_match_the_code():
    bad = {name: wrong_counts(text) for name, text in published().items()}
    assert not {k: v for k, v in bad.items() if v}, {k: v for k, v in bad.items() if v}


def test_what_the_counts_count():
    # the counts the guard compares with are the ones a reader would make
    assert len(public_writers()) == 7  # load/save, shared save, align, dedup, edit, convert,
    # quantize
    assert len(scenarios()) == 4
    assert "deduplicate" in howtos() and "convert_float16" in howtos()
    assert set(subcommands()) >= {"align", "convert", "dedup", "info", "verify"}
    assert "onnx_light.onnx.convert_float_to_float16" in streaming_helpers()


def test_no_literal_figure_of_the_report_in_prose():
    figures = report_figures()
    bad = {name: literal_report_figures(text, figures) for name, text in published().items()}
    assert not {k: v for k, v in bad.items() if v}, {k: v for k, v in bad.items() if v}


# -- figures of the proof reports -------------------------------------------------------

# The reports that the how-tos include (``markdown-report``) or name (the script
# that writes them): their figures are the report's, quoted from it, never typed.
PROOF_REPORTS = ("ort_alignment", "convert_proof", "threads_proof", "dedup_proof")
PROOF_REPORTS += ("edit_proof", "peer_settings", "load_ab", "tensor_cost", "window_sync")
PROOF_REPORTS += ("cold_proof", "memory_split")
PROOF_REPORTS += ("ort_prepacking", "quantize_memory")
PROOF_REPORTS += ("quantize_proof",)
_NUM = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"
_UNITS = {"s": "s", "MiB": "MiB", "GiB": "MiB", "KiB": "MiB", "MB": "MB", "GB": "MB"}
_UNITS |= {"x": "x", "times": "x", "us": "us"}  # microseconds: the cost of a tensor
_SCALE = {"GiB": 1024.0, "KiB": 1 / 1024, "GB": 1000.0}
# a figure, or a list of them sharing one unit ("636 and 655 MiB", "6.8 and 15.8 times")
PROOF_FIGURE = re.compile(
    rf"(?<![\w.,/-])((?:{_NUM})(?:(?:\s*,\s*|\s+and\s+|\s+to\s+|\s*-\s*)(?:{_NUM}))*)"
    r"[ \t]*\n?[ \t]*(s|us|MiB|GiB|KiB|MB|GB|x|times)(?![\w-])"
)
_HEADER_UNIT = re.compile(r"(?:\(|, )(s|us|MiB|GiB|KiB|MB|GB)\)?\s*$")


def _figures_of(text: str, found: dict[str, list[float]]) -> None:
    for m in PROOF_FIGURE.finditer(text):
        unit = m.group(2)
        for digits in re.findall(_NUM, m.group(1)):
            value = float(digits.replace(",", "")) * _SCALE.get(unit, 1.0)
            found[_UNITS[unit]].append(value)


def _table_figures(rows: list[list[str]], found: dict[str, list[float]]) -> None:
    """The figures of a table: a cell's own unit, else its column header's ("(MiB)")."""
    header = rows[0]
    for row in rows[1:]:
        for head, cell in zip(header, row, strict=False):
            _figures_of(cell, found)
            m = _HEADER_UNIT.search(head.strip())
            if m and not PROOF_FIGURE.search(cell):
                for digits in re.findall(rf"(?<![\w.])({_NUM})", cell):
                    value = float(digits.replace(",", "")) * _SCALE.get(m.group(1), 1.0)
                    found[_UNITS[m.group(1)]].append(value)


def proof_figures(report: str) -> dict[str, list[float]]:
    """The figures of ``benchmarks/proofs/results/REPORT.md`` (its tables and its prose), by
    unit (seconds, microseconds, MiB, MB, ratios)."""
    found: dict[str, list[float]] = {"s": [], "us": [], "MiB": [], "MB": [], "x": []}
    text = _read(os.path.join(PROOF_RESULTS, f"{report}.md"))
    table: list[list[str]] = []
    for line in [*text.split("\n"), ""]:
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not all(re.fullmatch(r":?-+:?", c) for c in cells):
                table.append(cells)
            continue
        if table:
            _table_figures(table, found)
            table = []
        _figures_of(line, found)
    return found


def without_tables(text: str) -> str:
    """A page's prose without its ``list-table`` directives (a table is a record)."""
    return re.sub(r"\.\. list-table::.*?(?=\n\S|\Z)", "", text, flags=re.DOTALL)


def cited_proofs(name: str, text: str) -> list[str]:
    """The proof reports a text cites: it names the script, or the report, or includes it."""
    return [r for r in PROOF_REPORTS if re.search(rf"\b{r}\.(py|md|csv)", text)]


def literal_proof_figures(text: str, figures: dict[str, list[float]]) -> list[str]:
    """Figures of a proof report written by hand in a text that cites that report."""
    found = []
    prose = ROLE.sub(" ", without_tables(text))
    for m in PROOF_FIGURE.finditer(prose):
        unit = m.group(2)
        for digits in re.findall(_NUM, m.group(1)):
            value = float(digits.replace(",", ""))
            if _is_size(value):
                continue
            decimals = len(digits.partition(".")[2])
            step = 10.0**-decimals * (0.5 if decimals else 1.0)
            value, step = value * _SCALE.get(unit, 1.0), step * _SCALE.get(unit, 1.0)
            if any(abs(value - v) <= step * (1 + 1e-9) for v in figures[_UNITS[unit]]):
                found.append(f"{digits} {unit} in {line_of(prose, m.start())!r}")
    return found


def test_no_literal_figure_of_a_proof_report_in_prose():
    reports = {r: proof_figures(r) for r in PROOF_REPORTS}
    bad = {}
    for name, text in published().items():
        hits = [
            h for r in cited_proofs(name, text) for h in literal_proof_figures(text, reports[r])
        ]
        if hits:
            bad[name] = hits
    assert not bad, bad


def test_the_proof_reports_have_figures():
    # the parser reads each report: an empty list would let every figure through
    for report in PROOF_REPORTS:
        figures = proof_figures(report)
        assert sum(len(v) for v in figures.values()) > 20, report


@pytest.mark.parametrize(
    ("report", "paragraph"),
    [
        (
            "ort_alignment",
            "GPT-2's session peaks at 1011 MiB (``benchmarks/proofs/ort_alignment.py``).",
        ),
        ("ort_alignment", "peak at 636 and 655 MiB; created 6.8 and 15.8 times faster"),
        ("convert_proof", "the 2.7 GiB BERT converted in 5.2 s, 10.3x faster"),
        ("threads_proof", "warm, one thread was faster than four (1.43x)"),
        ("dedup_proof", "merge_decoders peaked at 2.87 GiB"),
        ("edit_proof", "The Extractor held 5,762 MiB at its peak."),
        ("ort_prepacking", "The float32 session keeps 927 MiB of its own; int4 185 MiB."),
        ("quantize_proof", "On the Llama, onnxruntime's quantizer peaked at 236 MiB."),
    ],
)
def test_the_proof_guard_catches_a_figure_typed_by_hand(report, paragraph):
    assert literal_proof_figures(paragraph, proof_figures(report))


def test_the_proof_guard_passes_sizes_and_tables():
    text = "Models of 96 MiB to 4 GiB.\n\n.. list-table::\n\n   * - 1011 MiB\n\nEnd.\n"
    assert not literal_proof_figures(text, proof_figures("ort_alignment"))


# -- each guard catches its defect --------------------------------------------------------


@pytest.mark.parametrize(
    "sentence",
    [
        "The dedup rows (issue 19) have their own report.",
        "Issue 20 asked for the case this tool is for.",
        "as issue #12 says",
    ],
)
def test_the_issue_guard_catches_an_issue_number(sentence):
    assert internal_issues(sentence)


def test_the_issue_guard_lets_a_linked_issue_through():
    assert not internal_issues("`onnx#6226 <https://github.com/onnx/onnx/issues/6226>`__")


@pytest.mark.parametrize(
    "sentence",
    [
        "The three writers sit on top, beside the facade.",
        "the two helpers",
        "The map of the two scenarios",
        "Four verbs on model files:",
        "The argument parser, with its four subcommands.",
        "6 how-tos",
    ],
)
def test_the_count_guard_catches_a_wrong_count(sentence):
    assert wrong_counts(sentence)


def test_the_count_guard_passes_a_right_count():
    n = len(subcommands())
    assert not wrong_counts(f"{n} verbs, {len(public_writers())} writers")


@pytest.mark.parametrize(
    "paragraph",
    [
        "It grows with the metadata (a model of 200,000 tiny tensors: some 485 MiB in "
        "``make bench``).",
        "onnx-ir 1.1 streams a re-align too (0.6 MiB of memory for 1 GiB in ``make bench``).",
        "The cold row of :ref:`l-benchmarks` took 0.944 s, a ratio of 0.79x.",
    ],
)
def test_the_figure_guard_catches_a_figure_typed_by_hand(paragraph):
    assert literal_report_figures(paragraph, report_figures())


def test_the_figure_guard_passes_sizes_targets_and_roles():
    paragraph = (
        "``make bench`` re-aligns models of 96 MiB to 4 GiB; the target is 1.3x; it took "
        ":bench:`align vs copyfile, seconds, 4GiB, value`, within 8 MiB of memory."
    )
    assert not literal_report_figures(paragraph, report_figures())


def test_text_cells_are_what_the_gallery_renders():
    source = '"""\nTitle\n=====\n\nThe (issue 3) intro.\n"""\n\n# %%\n# A cell, issue 4.\n\nx = 1  # issue 5\n'
    text = gallery_text(source)
    assert "issue 3" in text and "issue 4" in text and "issue 5" not in text


def test_code_blocks_are_not_prose():
    page = (
        "Prose, issue 1.\n\n.. code-block:: python\n\n   issue 2\n\nText::\n\n   issue 3\n\n"
        ".. code-block:: text\n\n   the two helpers\n\nEnd."
    )
    prose = rst_prose(page)
    assert "issue 1" in prose and "issue 2" not in prose and "issue 3" not in prose
    assert wrong_counts(prose)  # a listing in words is read


# -- what the pages say of onnx's save, reproduced ----------------------------------------


def _onnx_save(folder: str, location: str = "m.onnx.data") -> None:
    onnx.save_model(
        make_gemm_model(2, 256),
        os.path.join(folder, "m.onnx"),
        save_as_external_data=True,
        location=location,
    )


def test_onnx_appends_to_an_existing_weights_file_outside_the_current_folder(tmp_path, monkeypatch):
    """howto/load_save and design/security: onnx 1.23 looks for an existing weights
    file from the current folder; from elsewhere a second save appends to it."""
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.chdir(tmp_path)  # not the model's folder
    _onnx_save(str(out))
    first = os.path.getsize(out / "m.onnx.data")
    assert first == weights_nbytes(2, 256)
    before = [
        onnx.numpy_helper.to_array(t) for t in onnx.load(str(out / "m.onnx")).graph.initializer
    ]
    _onnx_save(str(out))  # the same save again
    assert os.path.getsize(out / "m.onnx.data") == 2 * first  # appended, not replaced
    after = onnx.load(str(out / "m.onnx"))  # the new .onnx reads the appended copy
    for a, b in zip(before, after.graph.initializer, strict=True):
        np.testing.assert_array_equal(a, onnx.numpy_helper.to_array(b))
    offsets = [
        int({e.key: e.value for e in t.external_data}["offset"])
        for t in onnx.load(str(out / "m.onnx"), load_external_data=False).graph.initializer
    ]
    assert min(offsets) >= first


def test_onnx_refuses_an_existing_weights_file_from_the_model_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the model's folder
    _onnx_save(str(tmp_path))
    with pytest.raises(FileExistsError):
        _onnx_save(str(tmp_path))


def test_onnx_light_replaces_an_existing_weights_file(tmp_path, monkeypatch):
    """What the load/save page says onnx-light does instead: the file is replaced."""
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    for _ in range(2):
        onnxl.save(make_gemm_model(2, 256), str(out / "m.onnx"), location="m.onnx.data")
    assert os.path.getsize(out / "m.onnx.data") == weights_nbytes(2, 256)

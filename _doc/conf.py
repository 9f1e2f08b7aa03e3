"""Sphinx configuration of the onnx-light documentation.

The build is offline: no remote intersphinx, no downloads. A few local
directives and roles render what only exists at build time:

- ``.. onnx-light-help:: [SUBCOMMAND]`` prints the ``--help`` of the
  ``onnx-light`` command (from :func:`onnx_light.cli.build_parser`);
- ``.. markdown-report:: PATH`` turns a Markdown report (the benchmark
  results) into reStructuredText, or says it is missing;
- ``.. bench-provenance:: PATH`` says where, when and at which commit that
  report was measured, how many library commits HEAD is ahead of it, and
  where the gallery's figures and words come from;
- ``:bench:`[REPORT:] OP vs REF, FIGURE, SIZE, WHAT``` prints one number of
  a committed benchmark report (``benchmarks/results/latest.csv``, or
  ``REPORT.csv`` beside it: ``dedup``, ``cold``), so the pages never state a
  measurement by hand; a row the report lacks fails the build;
- ``:report:`REPORT; ROW; COLUMN[; PART]``` prints one cell of a proof
  report's Markdown tables (``benchmarks/proofs/results/REPORT.md``: the
  one-off proofs indexed in ``benchmarks/proofs/README.md``), the same way.

``make doc`` runs every gallery example at full size; with ``UNITTEST_GOING=1``
in the environment the examples use small sizes (CI).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import sys

import matplotlib

matplotlib.use("Agg")

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective
from sphinx.util.parsing import nested_parse_to_nodes

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)  # gallery_order, imported by name by sphinx-gallery

import onnx_light  # noqa: E402

logger = logging.getLogger(__name__)

# -- Project -----------------------------------------------------------------

project = "onnx-light"
author = "onnx-light contributors"
copyright = "onnx-light contributors"  # noqa: A001
release = onnx_light.__version__
version = ".".join(release.split(".")[:2])

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    "sphinx_copybutton",
    "sphinx_design",
    "sphinx_gallery.gen_gallery",
]

exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "**/*.md"]
templates_path: list[str] = []
html_static_path = ["_static"]
html_css_files = ["custom.css"]
html_js_files = ["stack-tables.js"]  # comparison tables as cards on a phone

# -- Autodoc and napoleon (Google-style docstrings) -------------------------

autodoc_member_order = "bysource"
toc_object_entries_show_parents = "hide"  # "load()" in the page's table of contents
autodoc_typehints = "description"
autodoc_typehints_description_target = "documented_params"
autodoc_class_signature = "mixed"  # the constructor with the class: no separate __init__ or __new__
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_ivar = True  # "Attributes:" as fields: no duplicate entries for dataclasses
napoleon_use_rtype = False

# -- HTML --------------------------------------------------------------------

html_theme = "pydata_sphinx_theme"
html_title = f"onnx-light {release}"
html_theme_options = {
    "navbar_align": "left",
    "show_toc_level": 2,
    "navigation_with_keys": False,
    # the security page's comparison tables need the whole width
    "secondary_sidebar_items": {"**": ["page-toc", "sourcelink"], "design/security": []},
    "footer_start": ["copyright"],
    "footer_end": ["sphinx-version"],
}
# Gallery pages hold 100-column code: give it the room of the left sidebar.
html_sidebars = {
    "index": [],
    "howto/*": [],  # recipes of up to 90 columns: read whole at 1280 px
    "benchmarks": [],
    "auto_examples/*/plot_*": [],
    "design/security": [],
}
html_context = {"default_mode": "light"}
html_show_sourcelink = False

copybutton_prompt_text = r">>> |\.\.\. |\$ "
copybutton_prompt_is_regexp = True

# -- Gallery -----------------------------------------------------------------

sphinx_gallery_conf = {
    "examples_dirs": "../examples",
    "gallery_dirs": "auto_examples",
    "filename_pattern": "plot_",  # run every example
    # Getting started first, then the benchmarks
    "subsection_order": ["../examples/getting_started", "../examples/benchmarks"],
    "within_subsection_order": "gallery_order.ReadingOrder",  # _doc/gallery_order.py
    "image_scrapers": ("matplotlib",),
    "reset_modules": ("matplotlib",),
    "remove_config_comments": True,
    "download_all_examples": False,
    "show_memory": False,
    "min_reported_time": 1,
    "capture_repr": ("_repr_html_", "__repr__"),
    "reference_url": {},
    "image_srcset": ["2x"],  # sharp figures on HiDPI screens
    "doc_module": ("onnx_light",),  # "Examples using ..." on the API pages
    "backreferences_dir": "gen_modules/backreferences",
    "inspect_global_variables": False,
    "write_computation_times": False,  # its page pulls DataTables from a CDN: offline site
}

# -- The onnx-light command --------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _cli_parser() -> argparse.ArgumentParser | None:
    try:
        from onnx_light.cli import build_parser
    except ImportError:
        return None
    return build_parser()


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def render_help(parser: argparse.ArgumentParser) -> str:
    """The ``--help`` text of a parser, 76 columns wide (the page's width), without colours."""
    saved = {k: os.environ.get(k) for k in ("COLUMNS", "NO_COLOR", "FORCE_COLOR")}
    os.environ.update(COLUMNS="76", NO_COLOR="1")
    os.environ.pop("FORCE_COLOR", None)
    try:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            parser.print_help()
        return _ANSI.sub("", out.getvalue()).rstrip()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


class OnnxLightHelp(SphinxDirective):
    """``.. onnx-light-help:: [SUBCOMMAND]``: the command's help as a literal block."""

    optional_arguments = 1
    has_content = False

    def run(self) -> list[nodes.Node]:
        parser = _cli_parser()
        if parser is None:
            para = nodes.paragraph(
                text="(The help text appears here once onnx_light.cli is installed.)"
            )
            return [para]
        name = self.arguments[0] if self.arguments else None
        if name is not None:
            subs = _subparsers(parser)
            if name not in subs:
                raise self.error(f"onnx-light has no subcommand {name!r} (has {sorted(subs)})")
            parser = subs[name]
        text = render_help(parser)
        block = nodes.literal_block(text, text)
        block["language"] = "text"
        return [block]


# -- Markdown reports (benchmarks) ------------------------------------------

_HEADINGS = "-~^\"'"


def _md_inline(text: str) -> str:
    """Markdown inline markup to reStructuredText (code, bold, links)."""
    text = re.sub(r"\[([^\]]+)\]\(([^)]+)\)", r"`\1 <\2>`__", text)
    text = re.sub(r"\*\*([^*]+)\*\*", r"**\1**", text)
    return re.sub(r"(?<!`)`([^`]+)`(?!`)", r"``\1``", text)


def _md_table(rows: list[str]) -> list[str]:
    cells = [[c.strip() for c in r.strip().strip("|").split("|")] for r in rows]
    body = [c for c in cells if not all(re.fullmatch(r":?-{2,}:?", x or "-") for x in c)]
    width = len(body[0])
    out = [
        ".. list-table::",
        "   :header-rows: 1",
        "   :widths: auto",
        f"   :class: report-table report-cols-{width}",  # _static/custom.css: by columns
        "",
    ]
    for row in body:
        row = (row + [""] * width)[:width]
        out.append("   * - " + (_md_inline(row[0]) or r"\ "))
        out.extend("     - " + (_md_inline(c) or r"\ ") for c in row[1:])
    return [*out, ""]


def markdown_to_rst(text: str, image_dir: str = "") -> str:
    """Convert the Markdown of a benchmark report to reStructuredText.

    Handles what such reports use: ``#`` headings (demoted under the page's
    title), pipe tables (as ``list-table``), fenced code, images, lists and
    paragraphs.

    Args:
        text: the Markdown.
        image_dir: prefix for relative image paths (as seen from the page).
    """
    lines = text.splitlines()
    levels = sorted({len(m.group(1)) for m in (re.match(r"(#+)\s", ln) for ln in lines) if m})
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        heading = re.match(r"(#+)\s+(.*)", line)
        if line.startswith("```"):
            lang = line[3:].strip() or "text"
            out += [f".. code-block:: {lang}", ""]
            i += 1
            while i < len(lines) and not lines[i].startswith("```"):
                out.append("   " + lines[i])
                i += 1
            out.append("")
        elif heading:
            level = levels.index(len(heading.group(1)))
            title = _md_inline(heading.group(2).strip())
            out += ["", title, _HEADINGS[min(level, len(_HEADINGS) - 1)] * len(title), ""]
        elif line.lstrip().startswith("|"):
            rows = []
            while i < len(lines) and lines[i].lstrip().startswith("|"):
                rows.append(lines[i])
                i += 1
            out += ["", *_md_table(rows)]
            continue
        elif m := re.match(r"!\[([^\]]*)\]\(([^)]+)\)", line.strip()):
            src = m.group(2)
            if not re.match(r"[a-z]+://", src) and not src.startswith("/"):
                src = os.path.join(image_dir, src).replace(os.sep, "/")
            out += ["", f".. image:: {src}", f"   :alt: {m.group(1)}", ""]
        else:
            out.append(_md_inline(line))
        i += 1
    return "\n".join(out) + "\n"


class MarkdownReport(SphinxDirective):
    """``.. markdown-report:: PATH``: include a Markdown report, if it exists.

    ``PATH`` is relative to the document. When the file is missing the
    directive renders the ``:missing:`` text instead, without a warning.
    """

    required_arguments = 1
    option_spec = {"missing": directives.unchanged}

    def run(self) -> list[nodes.Node]:
        rel, path = self.env.relfn2path(self.arguments[0], self.env.docname)
        if not os.path.exists(path):
            missing = self.options.get("missing", f"{self.arguments[0]} does not exist yet.")
            return [nodes.paragraph(text=missing)]
        self.env.note_dependency(path)
        with open(path, encoding="utf-8") as f:
            rst = markdown_to_rst(f.read(), os.path.dirname(self.arguments[0]))
        return nested_parse_to_nodes(self.state, rst, source=path, allow_section_headings=True)


class BenchProvenance(SphinxDirective):
    """``.. bench-provenance:: PATH``: where and when a committed report was measured.

    Reads the report's ``machine:`` line (machine, commit, date) and counts,
    with git, the commits that changed the library (``onnx_light/``) since
    that commit, at build time.
    """

    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        _, path = self.env.relfn2path(self.arguments[0], self.env.docname)
        if not os.path.exists(path):
            return []
        self.env.note_dependency(path)
        # the text names HEAD: the page is read again at every build (_reread_provenance)
        _provenance_docs(self.env).add(self.env.docname)
        with open(path, encoding="utf-8") as f:
            line = next((x for x in f if x.startswith("machine: ")), "")
        m = re.match(r"machine: (.*) \(([0-9a-f]+)[^)]*\), (.*)$", line.strip())
        if not m:
            return [nodes.paragraph(text="The report does not say where it was measured.")]
        machine, commit, date = m.groups()
        behind = _commits_since(commit)
        head = _git("rev-parse", "--short", "HEAD") or "unknown"
        since = (
            "the library (onnx_light/) is as it was then"
            if behind == 0
            else f"the library (onnx_light/) has changed in {behind} commit(s) since"
            if behind is not None
            else "how far the library has moved since could not be computed (no git history)"
        )
        text = (
            f"**Where these numbers come from.** The report below was measured on {date}, "
            f"at commit ``{commit}``, on this machine: {machine}. This site was built at "
            f"commit ``{head}``: {since}. The :ref:`gallery <l-gallery>`'s benchmark pages "
            "measure again on the machine that builds the site, when it builds it: their "
            "figures and plots are that build's, while their words (a ranking, or \"within "
            "this machine's noise\") come from the gallery report "
            "(``benchmarks/results/gallery.json``, below), measured once, and each page says "
            "whether its own figures fall inside that report's range. Where this report's "
            "figures and a gallery page's disagree, the reasons can be other hardware, "
            "another filesystem (the report's tables name theirs), other sizes, the "
            "library's changes since the report, or a noisy neighbour on a shared machine."
        )
        return nested_parse_to_nodes(self.state, text, source=path)


def _provenance_docs(env) -> set[str]:
    """The pages that hold a ``bench-provenance`` (kept in the environment)."""
    if not hasattr(env, "onnx_light_provenance"):
        env.onnx_light_provenance = set()
    return env.onnx_light_provenance


def _reread_provenance(app, env, added, changed, removed) -> list[str]:
    """``env-get-outdated``: a page whose provenance names HEAD is read again at every
    build, else an incremental build would show the commit of the build that last read it."""
    return sorted(_provenance_docs(env) - set(removed))


def _purge_provenance(app, env, docname) -> None:
    _provenance_docs(env).discard(docname)


def _merge_provenance(app, env, docnames, other) -> None:
    _provenance_docs(env).update(_provenance_docs(other) & set(docnames))


def _git(*args: str) -> str | None:
    import subprocess

    try:
        done = subprocess.run(
            ["git", *args], cwd=os.path.dirname(__file__), capture_output=True, text=True
        )
    except OSError:
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _commits_since(commit: str) -> int | None:
    """Commits that changed onnx_light/ between ``commit`` and HEAD (None: unknown)."""
    out = _git("rev-list", "--count", f"{commit}..HEAD", "--", "../onnx_light")
    return int(out) if out and out.isdigit() else None


# -- Every public name is documented ----------------------------------------

_API_PAGES = {"onnx_light.onnx": "api/onnx.rst"}


def check_api_pages(app) -> None:
    """Warn (an error under -W) when a name of ``__all__`` is missing from its page."""
    import importlib

    for module_name, page in _API_PAGES.items():
        module = importlib.import_module(module_name)
        with open(os.path.join(app.srcdir, page), encoding="utf-8") as f:
            text = f.read()
        for name in module.__all__:
            if not re.search(rf"::\s+(?:{re.escape(module_name)}\.)?{re.escape(name)}\b", text):
                logger.warning(f"{module_name}.{name} is public but not documented in {page}")


# -- References to other projects, offline ------------------------------------

# The build has no network, hence no intersphinx inventory: a reference to
# onnx, numpy, the standard library... renders as a plain literal (what it
# names, in code font). References to onnx-light's own objects must resolve:
# the build runs nitpicky (-n), so one that does not is an error.
EXTERNAL = (
    "onnx.",
    "onnx_ir",
    "onnxruntime",
    "numpy",
    "pandas",
    "os.",
    "collections.",
    "argparse.",
    "typing.",
    "pathlib.",
    "subprocess.",
)
EXTERNAL_MODULES = {
    "onnx",
    "onnxruntime",
    "shutil",
    "tracemalloc",
    "cProfile",
    "os",
    "mmap",
}


def literal_for_external(app, env, node, contnode):
    """Render an unresolvable reference to another project as a literal."""
    target = node.get("reftarget", "")
    if target.startswith(EXTERNAL) or target in EXTERNAL_MODULES:
        return nodes.literal(target, contnode.astext() if contnode is not None else target)
    return None


# -- Numbers of the benchmark report, quoted in the pages -----------------------

BENCH_RESULTS = os.path.join(ROOT, "benchmarks", "results")  # make bench's reports
PROOF_RESULTS = os.path.join(ROOT, "benchmarks", "proofs", "results")  # the proofs' reports
BENCH_CSV = os.path.join(BENCH_RESULTS, "latest.csv")
_bench_rows: dict[str, list[dict]] = {}


def _bench_table(report: str = "latest") -> list[dict]:
    if report not in _bench_rows:
        import csv

        path = os.path.join(BENCH_RESULTS, f"{report}.csv")
        with open(path, newline="", encoding="utf-8") as f:
            _bench_rows[report] = list(csv.DictReader(f))
    return _bench_rows[report]


_BYTES_FIGURES = {"peak", "anon", "bytes"}


def _per_tensor(row: dict) -> str | None:
    """A row's value over the number of tensors its operation names ("200,000 tensors"):
    KiB for memory and bytes, microseconds for a time."""
    m = re.search(r"([\d,]+) tensors", row["operation"])
    if not m or not row["value_raw"]:
        return None
    per = float(row["value_raw"]) / int(m.group(1).replace(",", ""))
    if row["fig"] in _BYTES_FIGURES:
        return f"{per / 1024:.1f} KiB"
    if row["fig"] in ("seconds", "cpu", "to_disk"):
        return f"{per * 1e6:.1f} us"
    return None


def _tensors(row: dict) -> str | None:
    """The number of tensors a row's operation names ("200,000 tensors of 64 bytes")."""
    m = re.search(r"([\d,]+) tensors", row["operation"])
    return m.group(1) if m else None


def _round_ratios(row: dict) -> str | None:
    """The lowest and highest per-round ratio of a row (``0.51x-1.97x``): how far its
    rounds spread around the median ratio the report states."""
    try:
        values = [float(v) for v in row["values"].split()]
        refs = [float(v) for v in row["ref_values"].split()]
    except (KeyError, ValueError):
        return None
    ratios = [v / r for v, r in zip(values, refs, strict=True) if r > 0]
    return f"{min(ratios):.2f}x-{max(ratios):.2f}x" if len(ratios) > 1 else None


def _round_range(row: dict, column: str) -> str | None:
    """The lowest and highest of a row's (``values``) or its reference's
    (``ref_values``) rounds, in seconds (``0.38-0.71 s``)."""
    try:
        values = [float(v) for v in row[column].split()]
    except (KeyError, ValueError):
        return None
    return f"{min(values):.2f}-{max(values):.2f} s" if len(values) > 1 else None


def bench_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    """``:bench:`align vs copyfile, seconds, 1GiB on xfs, ratio```: one number of the report.

    ``WHAT`` is ``value``, ``ref`` (the reference's value), ``ratio``,
    ``result``, ``per tensor`` (a memory or bytes value over the number of
    tensors the operation names, in KiB; a time, in microseconds), ``tensors``
    (that number) or
    ``rounds`` (the lowest and highest per-round ratio), ``value_rounds`` or
    ``ref_rounds`` (the lowest and highest of its or its reference's rounds,
    in seconds); ``SIZE`` is the size, followed by
    `` on FS`` for the tables of other filesystems. A ``REPORT:`` prefix
    (``dedup: dedup_many vs dedup_quarter, peak, 1GiB, per tensor``) reads
    ``benchmarks/results/REPORT.csv`` instead of ``latest.csv``.
    """
    report, sep, rest = text.partition(":")
    if not sep or " vs " in report:
        report, rest = "latest", text
    try:
        pair, figure, label, what = (x.strip() for x in rest.split(","))
        op, ref = (x.strip() for x in pair.split(" vs "))
        rows = _bench_table(report.strip())
    except (ValueError, OSError):
        msg = inliner.reporter.error(
            f"bench: expected '[REPORT:] OP vs REF, FIGURE, SIZE, WHAT': {text!r}"
        )
        return [inliner.problematic(rawtext, rawtext, msg)], [msg]
    env = inliner.document.settings.env
    env.note_dependency(os.path.join(BENCH_RESULTS, f"{report.strip()}.csv"))
    size, _, fs = label.partition(" on ")
    for row in rows:
        if (row["op"], row["ref_op"], row["fig"], row["size"], row["fs"]) == (
            op,
            ref,
            figure,
            size,
            fs,
        ):
            shown = {
                "value": row["value"],
                "ref": row["ref value"],
                "ratio": f"{float(row['ratio_raw']):.2f}x" if row["ratio_raw"] else "n/a",
                "result": row["result"],
                "per tensor": _per_tensor(row),
                "tensors": _tensors(row),
                "rounds": _round_ratios(row) if what == "rounds" else None,
                "value_rounds": _round_range(row, "values") if what == "value_rounds" else None,
                "ref_rounds": _round_range(row, "ref_values") if what == "ref_rounds" else None,
            }.get(what)
            if shown is not None:
                return [nodes.Text(shown)], []
    msg = inliner.reporter.error(f"bench: no row {text!r} in {report.strip()}.csv")
    return [inliner.problematic(rawtext, rawtext, msg)], [msg]


# -- Figures of the proof reports (Markdown tables), quoted in the pages ---------

_md_tables: dict[str, list[tuple[str, list[list[str]]]]] = {}  # (## heading, table)
_CELL_UNIT = re.compile(r"(?:\(|, )(s|MiB|GiB|KiB|MB|GB)\)?\s*$")


def _report_tables(report: str) -> list[list[list[str]]]:
    """The pipe tables of ``benchmarks/proofs/results/REPORT.md``: rows of cells, header
    first. ``REPORT#Section``: only the tables under the ``##`` heading ``Section``."""
    report, _, section = report.partition("#")
    if report not in _md_tables:
        with open(os.path.join(PROOF_RESULTS, f"{report}.md"), encoding="utf-8") as f:
            lines = f.read().split("\n")
        tables, current, heading = [], [], ""
        for line in [*lines, ""]:
            if line.startswith("|"):
                cells = [c.strip() for c in line.strip().strip("|").split("|")]
                if not all(re.fullmatch(r":?-+:?", c) for c in cells):
                    current.append(cells)
                continue
            if current:
                tables.append((heading, current))
                current = []
            if line.startswith("## "):
                heading = line[3:].strip()
        _md_tables[report] = tables
    return [table for heading, table in _md_tables[report] if not section or heading == section]


def report_cell(report: str, row: str, column: str, part: str = "cell") -> str:
    """One cell of a proof report's tables, as the report prints it.

    ``report``: its name, or ``NAME#Section`` for the tables under one ``##``
    heading (``ort_alignment#After one inference``);
    ``row``: cells of the row, joined by `` / `` (``gpt2 / single / default``),
    each equal to one of the row's cells; ``column``: the start of the column's
    header (``session peak RSS growth``); the first table that has both, and
    exactly one such row, is read. ``part``: ``cell`` (the whole cell),
    ``median`` (its first number), ``min`` or ``max`` (the range in its
    parentheses: ``(635.8-635.9)`` or ``(0.60, 0.98, 1.38)``'s ends). A number
    gets the unit its header gives (``, MiB``, ``(s)``). Raises ``LookupError``
    when the report has no such cell.
    """
    keys = [k.strip() for k in row.split(" / ")]
    for table in _report_tables(report):
        header = table[0]
        cols = [i for i, h in enumerate(header) if h.startswith(column)]
        rows = [r for r in table[1:] if all(k in r for k in keys)]
        if not cols or not rows:
            continue
        if len(rows) > 1:
            raise LookupError(f"{len(rows)} rows match {row!r} in {report}.md")
        cell = rows[0][cols[0]]
        if part == "cell":
            return cell
        numbers = re.findall(r"\d[\d,]*(?:\.\d+)?", cell)
        inner = re.search(r"\(([^)]*)\)", cell)
        ends = re.findall(r"\d[\d,]*(?:\.\d+)?", inner.group(1)) if inner else []
        picked = {
            "median": numbers[0] if numbers else None,
            "min": ends[0] if ends else None,
            "max": ends[-1] if ends else None,
        }.get(part)
        if picked is None:
            raise LookupError(f"no {part!r} in the cell {cell!r} of {report}.md")
        unit = _CELL_UNIT.search(header[cols[0]])
        return f"{picked} {unit.group(1)}" if unit else picked
    raise LookupError(f"no row {row!r} with a column {column!r} in {report}.md")


def report_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    """``:report:`ort_alignment; gpt2 / single / default; session peak RSS growth; median```.

    One figure of a proof report (``benchmarks/proofs/results/REPORT.md``, the
    Markdown its script writes), so that a page quoting it states what the
    committed report holds: see :func:`report_cell`. A cell the report lacks
    fails the build.
    """
    parts = [x.strip() for x in text.split(";")]
    env = inliner.document.settings.env
    env.note_dependency(os.path.join(PROOF_RESULTS, f"{parts[0].partition('#')[0]}.md"))
    try:
        return [nodes.Text(report_cell(*parts))], []
    except (TypeError, LookupError, OSError) as exc:
        msg = inliner.reporter.error(f"report: {exc} ({text!r})")
        return [inliner.problematic(rawtext, rawtext, msg)], [msg]


# -- "Examples using ..." under every documented function and class ----------

# sphinx-gallery writes, for each object of ``doc_module`` an example uses,
# the list of those examples (``backreferences_all.json`` in
# ``backreferences_dir``, before any page is read). Every function, class
# and exception autodoc documents that an example uses (a class: it or one
# of its members) gets, at the end of its docstring, a rubric and a
# ``minigallery`` of those examples; an object no example uses gets
# nothing. A rubric, not the directive's own heading: a heading opens a
# section, which would swallow a class's members.
MINIGALLERY_KINDS = {"function", "class", "exception"}


def _used_names(app, name: str, what: str) -> list[str]:
    """The names under which gallery examples use the object ``name``.

    For a class, its methods and properties count: an example that calls
    ``rounds.compare(...)`` uses the class ``Rounds``.
    """
    path = os.path.join(
        app.srcdir, app.config.sphinx_gallery_conf["backreferences_dir"], "backreferences_all.json"
    )
    try:
        with open(path, encoding="utf-8") as f:
            used = {key for key, examples in json.load(f).items() if examples}
    except FileNotFoundError:
        return []
    members = what in {"class", "exception"}
    return sorted(k for k in used if k == name or (members and k.startswith(name + ".")))


def add_minigallery(app, what, name, obj, options, lines) -> None:
    """``autodoc-process-docstring``: append "Examples using NAME" and their thumbnails."""
    used = _used_names(app, name, what) if what in MINIGALLERY_KINDS else []
    if not used:
        return
    short = name.rsplit(".", 1)[-1]
    lines.extend(
        [
            "",
            f".. rubric:: Examples using ``{short}``",
            "",
            f".. minigallery:: {' '.join(used)}",
            "",
        ]
    )


def setup(app):
    app.add_directive("onnx-light-help", OnnxLightHelp)
    app.add_directive("markdown-report", MarkdownReport)
    app.add_directive("bench-provenance", BenchProvenance)
    app.connect("env-get-outdated", _reread_provenance)
    app.connect("env-purge-doc", _purge_provenance)
    app.connect("env-merge-info", _merge_provenance)
    app.add_role("bench", bench_role)
    app.add_role("report", report_role)
    app.connect("builder-inited", check_api_pages)
    app.connect("missing-reference", literal_for_external)
    app.connect("autodoc-process-docstring", add_minigallery)
    return {"parallel_read_safe": True}

// Comparison tables (class "stack-narrow") and the benchmark reports' summaries
// (four columns: "report-cols-4", _doc/conf.py) read as cards on a narrow screen:
// each cell gets the text of its column's header, which custom.css shows
// before the cell under 720 px. Nothing changes on a wide screen.
document.addEventListener("DOMContentLoaded", () => {
  for (const table of document.querySelectorAll("table.stack-narrow, table.report-cols-4")) {
    const heads = [...table.querySelectorAll("thead th")].map((th) => th.textContent.trim());
    for (const row of table.querySelectorAll("tbody tr")) {
      [...row.children].forEach((cell, i) => {
        if (heads[i]) cell.dataset.label = heads[i];
      });
    }
  }
});

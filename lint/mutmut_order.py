"""pytest plugin for ``make mutate``: run a mutant's tests fastest first.

mutmut runs, for each mutant, the tests that call the mutated function, with
``-x``, in no set order. Run fastest first (durations from mutmut's stats
run, ``mutants/mutmut-stats.json``), a killed mutant stops after the quick
tests that catch it instead of after a random share of the slow ones. Only
the order changes: a survivor still runs every test. Loaded by
``[tool.mutmut] pytest_add_cli_args`` (``-p lint.mutmut_order``), outside
mutmut a no-op.
"""

from __future__ import annotations

import json
import os


def pytest_collection_modifyitems(session, config, items):
    if "__mutmut_" not in os.environ.get("MUTANT_UNDER_TEST", ""):
        return  # the stats, clean and forced-fail runs keep pytest's order
    try:
        with open("mutmut-stats.json") as f:  # mutmut runs the tests in mutants/
            durations = json.load(f)["duration_by_test"]
    except (OSError, ValueError, KeyError):
        return
    items.sort(key=lambda item: durations.get(item.nodeid, 0.0))

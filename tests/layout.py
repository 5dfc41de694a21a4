"""The house's order, declared once: the layers of ``pipeline`` left to right, and the rooms inside
the packages that hold a stage's rooms. ``test_layers.py`` checks the imports against it and
``test_docs.py`` checks ``docs/architecture.md`` against it."""

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def package_folders() -> dict[str, Path]:
    """Each package's folder: ``pipeline/``, and the top-level folders ``pyproject.toml`` maps into it
    (``flows/`` is ``pipeline.flows``)."""
    mapped = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    return {"pipeline": ROOT / "pipeline", **{name: ROOT / folder for name, folder in mapped.items()}}


def source_modules() -> dict[str, Path]:
    """Every module of the package, by its import name, with its file (wherever its folder sits)."""
    found: dict[str, Path] = {}
    for package, folder in package_folders().items():
        for path in sorted(folder.rglob("*.py")):
            parts = path.relative_to(folder).with_suffix("").parts
            found[".".join([package, *(parts[:-1] if parts[-1] == "__init__" else parts)])] = path
    return dict(sorted(found.items()))


# Left to right: a module may import its own layer's package and anything to its left.
LAYERS = (
    "errors",
    "checks",
    "paths",
    "specs",
    "schema",
    "grade",
    "datasets",
    "sample",
    # The pure functions of counts sit left of the store: they know nothing of storage, and the run
    # registry decodes a run's adaptive settings and prior into their records.
    "stats",
    # a prompt's price in tokens: its expected answer length under the population's
    "tokens",
    "estimators",
    "prior",
    # what the counts identify of a dataset mean, over every population that fits them
    "identify",
    "adaptive",
    # per-prompt priors from the labels a dataset carries, the round rules applied per label bin
    "labelprior",
    # what the rounds save against a fixed n and the frontier (the verdict, the report, the benches)
    "frontier",
    "store",
    "sql",
    "api",
    # the one builder of every command the tool prints
    "suggest",
    "analyze",
    "allocate",
    # the other allocation rules at the same budget, scored on allocate's objectives
    "peers",
    "finish",
    "calibrate",
    "export",
    "observe",
    # files other selectors warm-start from (MoPPS's index_score.json), from a run's counts
    "warmstart",
    "curriculum",
    # what a run means for training, from its tables: the CLI prints it, the report shows it first
    "verdict",
    "reports",
    # what a run hands back once finished: its verdict, computed once, and its report rendered with it
    "result",
    "run",
    "history",
    "ingest",
    "regrade",
    "integrations",
    "flows",
    "cli",
    "__main__",
)

# Inside a package that holds a stage's rooms, the rooms form their own order, left to right: a room
# imports only rooms to its left (and never its package's facade, which imports the rooms).
ROOMS = {
    "run": ("progress", "config", "plan", "shards", "rounds", "driver"),
    "store": ("fs", "files", "registry", "query"),
    "observe": ("record", "match", "sources", "trainers", "audit", "track", "current", "snapshot"),
    "reports": ("load", "charts", "sections", "compare", "render"),
    # one module per section, in page order, but ``rounds`` first: the run card, zero-signal and
    # pass@k sections show its posterior note
    "reports.sections": (
        "rounds",
        "run_card",
        "pass_rates",
        "weights",
        "gradient_share",
        "zero_signal",
        "allocation",
        "pass_at_k",
        "breakdown",
        "calibration",
        "training",
        "answers",
        "prompts",
    ),
}


# The modules of ``pipeline/cli/`` that are not a command's: what several commands share. Every other
# module is command ``x``'s own, ``cli/x.py``; it imports shared modules only, never another command's.
CLI_SHARED = (
    "errors",
    "output",
    "options",
    "analysis_options",
    "profile_options",
    "schedule_options",
    "calculator_options",
    "counts",
    "run_summary",
)

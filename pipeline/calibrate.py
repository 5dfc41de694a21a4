"""How well a dataset's own difficulty labels rank its prompts by the pass rates a run measured.

Labels: MATH's ``level`` (1 to 5, harder upward), DeepMath's ``difficulty`` (a rating), Big-Math's
prior solve rate (``llama8b_solve_rate``, easier upward), or any numeric field of the rows. A label
is read from the ``problems`` table (``difficulty``; ``prior_rate`` is ``prior_c / prior_n``), else
from the stored original row (``level``, ``extra_info.level``, a top-level or ``extra_info`` field
of that name). Text labels with a trailing number (``"Level 5"``) read as that number.

The measure is Spearman's rank correlation between the label and the measured pass rate ``c / n``
over the prompts that have both, ties given their average rank (Pearson's correlation of the
ranks). Its interval is a percentile bootstrap over prompts: each resample draws N prompts with
replacement, which is a multinomial count per distinct (label, pass rate) pair; the weighted
average ranks of a resample are computed in one pass over the values sorted once (the rank of a
value is the weight below it plus half the weight tied with it, plus one half), so a resample
costs the number of distinct pairs (a few hundred at most for a level against c / n), not N, and
ranks are never sorted again. A negative correlation means a larger label is harder (a level); a positive one that
a larger label is easier (a prior solve rate). The mean pass rate per label value (per quantile
bin when there are more than ``max_groups`` values) shows where the ranking breaks down.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline import datasets, finish, schema
from pipeline.checks import check_int, check_number
from pipeline.errors import ConfigError, DatasetError, StoreError
from pipeline.store import Store

log = logging.getLogger(__name__)

__all__ = [
    "SECTION",
    "Calibration",
    "CalibrationConfig",
    "calibrate",
    "calibrate_run",
    "from_summary",
    "label_values",
    "spearman",
    "spearman_interval",
    "summary_table",
    "write_calibration",
]

SECTION = "calibration"  # the summary table's section of calibration rows
PRIOR_RATE = "prior_rate"  # the label prior_c / prior_n (Big-Math's llama8b_solve_rate)
_PRIOR_ALIASES = (PRIOR_RATE, "llama8b_solve_rate")


@dataclass(frozen=True)
class CalibrationConfig:
    """Settings of a calibration.

    Attributes:
        label: the label to calibrate; None: ``difficulty`` when the run's prompts have one, else
            the prior solve rate.
        bootstrap: resamples of the interval (>= 100).
        level: coverage of the interval, in (0, 1).
        seed: seed of the resamples.
        max_groups: most label values shown one by one; more are put in this many quantile bins.
    """

    label: str | None = None
    bootstrap: int = 1000
    level: float = 0.95
    seed: int = 0
    max_groups: int = 12

    def __post_init__(self) -> None:
        check_int("bootstrap", self.bootstrap, 100)  # resamples
        check_number("level", self.level, 0, 1, lo_open=True, hi_open=True)
        check_int("max_groups", self.max_groups, 2)
        if self.label is not None and not self.label.strip():
            raise ConfigError("label must name a column or field, got an empty name")


@dataclass(frozen=True)
class Calibration:
    """One label's calibration against one run's pass rates."""

    run_id: str
    label: str
    source: str  # where the label was read: problems column, prior rate, original field
    n_prompts: int  # prompts with a label and samples (the correlation's N)
    n_unlabelled: int  # measured prompts without a (numeric) label
    n_unmeasured: int  # labelled prompts without samples
    rho: float
    lo: float
    hi: float
    level: float
    bootstrap: int
    groups: list[dict[str, Any]] = field(default_factory=list)  # group, label_mean, prompts, mean_pass_rate
    notes: list[str] = field(default_factory=list)

    def line(self) -> str:
        """The result in one line, as the CLI prints it."""
        interval = f"[{self.lo:.3f}, {self.hi:.3f}]" if math.isfinite(self.lo) else "[undefined]"
        rho = f"{self.rho:.3f}" if math.isfinite(self.rho) else "undefined"
        return (
            f"run {self.run_id}, label {self.label} ({self.source}): Spearman rho = {rho} {interval} "
            f"({self.level:.0%} bootstrap, {self.bootstrap} resamples) over {self.n_prompts} prompts; "
            f"{self.n_unlabelled} measured prompts without a label, {self.n_unmeasured} labelled without samples"
        )


# --- ranks and the correlation ------------------------------------------------------------------


def _groups(x: np.ndarray) -> tuple[np.ndarray, int]:
    """The index of each value among the sorted distinct values, and how many there are."""
    _, inv = np.unique(x, return_inverse=True)
    return inv.ravel(), int(inv.max()) + 1 if len(inv) else 0


def _ranks(inv: np.ndarray, k: int, w: np.ndarray) -> np.ndarray:
    """Average ranks of a sample holding item i ``w[i]`` times: the weight below a value plus
    (its tied weight + 1) / 2."""
    tied = np.bincount(inv, weights=w, minlength=k)
    below = np.cumsum(tied) - tied
    return (below + (tied + 1.0) / 2.0)[inv]


def _pearson(a: np.ndarray, b: np.ndarray, w: np.ndarray) -> float:
    # Sums, not ``@``: a BLAS dot product starts its threads on long vectors, which costs more
    # than the sum itself on a busy machine.
    sw = w.sum()
    da = a - (w * a).sum() / sw
    db = b - (w * b).sum() / sw
    va, vb = (w * da * da).sum(), (w * db * db).sum()
    if va <= 0 or vb <= 0:
        return math.nan
    return float(np.clip((w * da * db).sum() / math.sqrt(va * vb), -1.0, 1.0))


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rank correlation with average ranks for ties; NaN when either side is constant."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(x) < 2:
        return math.nan
    w = np.ones(len(x))
    ix, kx = _groups(x)
    iy, ky = _groups(y)
    return _pearson(_ranks(ix, kx, w), _ranks(iy, ky, w), w)


def spearman_interval(
    x: np.ndarray, y: np.ndarray, bootstrap: int = 1000, level: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval of Spearman's rho over resamples of the pairs (NaN, NaN when
    fewer than 3 pairs or no resample has a defined correlation).

    A resample of the N pairs is drawn as how many times it holds each distinct (x, y) pair: a
    multinomial of N over the distinct pairs with their shares as probabilities, the same law as
    N draws with replacement. Ranks depend only on those counts, so each resample costs the
    number of distinct pairs, not N: a pass rate at n samples has n + 1 values and a label a few,
    so a resample of 160,000 prompts is a table of a hundred cells or so.
    """
    x, y = np.asarray(x, float), np.asarray(y, float)
    N = len(x)
    if N < 3:
        return math.nan, math.nan
    ix, kx = _groups(x)
    iy, ky = _groups(y)
    cells, counts = np.unique(ix.astype(np.int64) * max(ky, 1) + iy, return_counts=True)
    cx, cy = cells // max(ky, 1), cells % max(ky, 1)
    rng = np.random.default_rng(seed)
    share = counts / N
    rhos = np.empty(bootstrap)
    for b in range(bootstrap):  # one resample at a time: as many cells as pairs when values are distinct
        w = rng.multinomial(N, share).astype(float)
        rhos[b] = _pearson(_ranks(cx, kx, w), _ranks(cy, ky, w), w)
    rhos = rhos[~np.isnan(rhos)]
    if not len(rhos):
        return math.nan, math.nan
    tail = (1.0 - level) / 2.0
    lo, hi = np.quantile(rhos, [tail, 1.0 - tail])
    return float(lo), float(hi)


# --- labels -------------------------------------------------------------------------------------


def _lookup(row: dict | None, label: str) -> tuple[bool, Any]:
    """A field of an original row: top level, a dotted path, or inside ``extra_info``."""
    if not row:
        return False, None
    if label in row:
        return True, row[label]
    node: Any = row
    for part in label.split("."):
        if not isinstance(node, dict) or part not in node:
            node = None
            break
        node = node[part]
    else:
        return True, node
    extra = row.get("extra_info")
    if isinstance(extra, dict) and label in extra:
        return True, extra[label]
    return False, None


# Numeric fields that are no difficulty label: gold answers and row numbers.
_NOT_LABELS = {"answer", "final_answer", "ground_truth", "index", "id", "__index_level_0__"}


def _numeric_fields(row: dict | None, prefix: str = "") -> list[str]:
    out = []
    for key, value in (row or {}).items():
        if key in _NOT_LABELS:
            continue
        if isinstance(value, dict):
            out += _numeric_fields(value, f"{prefix}{key}.")
        elif datasets.label_number(value) is not None:
            out.append(prefix + key)
    return out


def label_values(problems: pa.Table, label: str | None) -> tuple[str, str, list[Any]]:
    """The label's raw value per problem row: ``(label, where it was read, values)``.

    Raises:
        DatasetError: no default label, or a named label that no row has (the message lists the
            numeric fields the rows do have).
    """
    n = problems.num_rows
    difficulty = problems.column("difficulty").to_pylist()
    prior_n = problems.column("prior_n").to_pylist()
    prior_c = problems.column("prior_c").to_pylist()
    prior = [c / m if m and c is not None else None for m, c in zip(prior_n, prior_c, strict=True)]
    if label is None:
        if any(v is not None for v in difficulty):
            return "difficulty", "problems column", difficulty
        if any(v is not None for v in prior):
            return PRIOR_RATE, "prior_c / prior_n", prior
        raise DatasetError(
            "the run's problems have no difficulty label (difficulty) and no prior solve rate; name one with "
            f"--label COL (numeric fields of its rows: {_candidates(problems)})"
        )
    if label == "difficulty":
        return label, "problems column", difficulty
    if label in ("prior_n", "prior_c"):
        return label, "problems column", problems.column(label).to_pylist()
    originals = [datasets.original_row(t) for t in problems.column("original").to_pylist()]
    found = [_lookup(r, label) for r in originals]
    if any(ok for ok, _ in found):
        return label, "original field", [v for _, v in found]
    if label in _PRIOR_ALIASES and any(v is not None for v in prior):
        return label, "prior_c / prior_n", prior
    raise DatasetError(
        f"no problem of the run has a label {label!r}; numeric fields of its rows: {_candidates(problems)} "
        f"({n} rows; also difficulty and {PRIOR_RATE})"
    )


def _candidates(problems: pa.Table) -> list[str]:
    texts = problems.column("original").drop_null().to_pylist()[:50]
    names: dict[str, None] = {}
    for text in texts:
        for name in _numeric_fields(datasets.original_row(text)):
            names.setdefault(name, None)
    return list(names)


# --- the calibration ----------------------------------------------------------------------------


def _group_rows(labels: np.ndarray, p: np.ndarray, label: str, max_groups: int) -> list[dict[str, Any]]:
    values = np.unique(labels)
    if len(values) <= max_groups:
        bins = [(v, v, labels == v, f"{label}={v:g}") for v in values]
    else:
        edges = np.unique(np.quantile(labels, np.linspace(0, 1, max_groups + 1)))
        which = np.clip(np.searchsorted(edges, labels, side="right") - 1, 0, len(edges) - 2)
        bins = [
            (
                edges[j],
                edges[j + 1],
                which == j,
                f"{label} in [{edges[j]:g}, {edges[j + 1]:g}{']' if j == len(edges) - 2 else ')'}",
            )
            for j in range(len(edges) - 1)
        ]
    out = []
    for _, _, inside, name in bins:
        if inside.any():
            out.append(
                {
                    "group": name,
                    "label_mean": float(labels[inside].mean()),
                    "prompts": int(inside.sum()),
                    "mean_pass_rate": float(p[inside].mean()),
                }
            )
    return out


def calibrate(
    run_id: str,
    label: str,
    source: str,
    values: list[Any],
    pass_rates: list[float | None],
    config: CalibrationConfig | None = None,
    prompt_ids: list[str] | None = None,
) -> Calibration:
    """Calibrate raw label values against pass rates (aligned lists; None where a prompt has none).

    A label value that is not a number is left out and counted when some values are numbers; when
    none is, the label is not numeric and that is a ``DatasetError`` naming a prompt and its value.
    A label empty in every prompt, or on none of the measured ones, is a ``DatasetError`` too.
    """
    config = config or CalibrationConfig()
    numbers = [datasets.label_number(v) for v in values]
    text = [(i, v) for i, (v, x) in enumerate(zip(values, numbers, strict=True)) if v is not None and x is None]
    if text and len(text) == sum(v is not None for v in values):
        i, v = text[0]
        who = f"prompt {prompt_ids[i]}" if prompt_ids else f"row {i}"
        raise DatasetError(
            f"label {label!r} is not numeric: {who} has {str(v)[:80]!r}; name a numeric column "
            "(a level, a rating, a solve rate)"
        )
    notes = []
    if text:
        i, v = text[0]
        notes.append(f"{len(text)} label values are not numbers (e.g. {str(v)[:40]!r}); left out")
    measured = [p is not None and not (isinstance(p, float) and math.isnan(p)) for p in pass_rates]
    both = [x is not None and m for x, m in zip(numbers, measured, strict=True)]
    if not any(both):  # a correlation over no prompt is no result: say why rather than store it
        labelled = sum(x is not None for x in numbers)
        if not labelled:
            raise DatasetError(
                f"label {label!r} ({source}) is empty in every one of the run's {len(values)} prompts; "
                "nothing to correlate: name a label the rows have a value of with --label"
            )
        raise DatasetError(
            f"label {label!r}: none of the {labelled} labelled prompts has samples in run {run_id}; "
            "nothing to correlate: calibrate a run that sampled them"
        )
    x = np.array([numbers[i] for i, ok in enumerate(both) if ok], float)
    y = np.array([pass_rates[i] for i, ok in enumerate(both) if ok], float)
    rho = spearman(x, y)
    lo, hi = spearman_interval(x, y, config.bootstrap, config.level, config.seed)
    if len(x) and not math.isfinite(rho):
        notes.append("the correlation is undefined: every prompt has the same label or the same pass rate")
    return Calibration(
        run_id=run_id,
        label=label,
        source=source,
        n_prompts=len(x),
        n_unlabelled=sum(m and x_ is None for x_, m in zip(numbers, measured, strict=True)),
        n_unmeasured=sum(x_ is not None and not m for x_, m in zip(numbers, measured, strict=True)),
        rho=rho,
        lo=lo,
        hi=hi,
        level=config.level,
        bootstrap=config.bootstrap,
        groups=_group_rows(x, y, label, config.max_groups) if len(x) else [],
        notes=notes,
    )


def calibrate_run(store: Store, run_id: str, config: CalibrationConfig | None = None) -> Calibration:
    """Calibrate a label of run ``run_id``'s dataset against the run's measured pass rates.

    Raises:
        StoreError: unknown run, or no stored problems for its dataset.
        DatasetError: no such label, a label that is not numeric, or one no measured prompt has.
    """
    config = config or CalibrationConfig()
    run = store.get_run(run_id)
    dataset = run.dataset
    problems = store.read_table("problems", {"dataset": dataset}) if dataset else schema.PROBLEMS.empty_table()
    if not problems.num_rows:
        raise StoreError(f"run {run_id}: dataset {dataset!r} has no stored problems (their labels); load it again")
    analysis, _ = finish.analysis_of_run(store, run_id)
    st = analysis.prompt_stats
    rate = dict(zip(st.column("prompt_id").to_pylist(), st.column("pass_rate").to_pylist(), strict=True))
    n = dict(zip(st.column("prompt_id").to_pylist(), st.column("n").to_pylist(), strict=True))
    in_run = pc.is_in(problems.column("prompt_id"), st.column("prompt_id"))
    problems = problems.filter(in_run)  # the run's prompts (a dataset loaded again with more rows has others)
    label, source, values = label_values(problems, config.label)
    ids = problems.column("prompt_id").to_pylist()
    rates = [rate[p] if n[p] else None for p in ids]
    return calibrate(run_id, label, source, values, rates, config, ids)


# --- the summary table --------------------------------------------------------------------------


def summary_table(cal: Calibration) -> pa.Table:
    """The calibration as ``summary`` rows (section ``calibration``): ``spearman``,
    ``spearman_lo``, ``spearman_hi``, ``spearman_level`` (the interval's coverage) and
    ``unlabelled`` with band = the label; per group ``mean_pass_rate`` and
    ``mean_label`` with band = the group (``level=3``, ``difficulty in [5, 6.5)``)."""
    rows = [
        ("spearman", cal.label, cal.rho, cal.n_prompts),
        ("spearman_lo", cal.label, cal.lo, cal.n_prompts),
        ("spearman_hi", cal.label, cal.hi, cal.n_prompts),
        ("spearman_level", cal.label, cal.level, cal.n_prompts),
        ("unlabelled", cal.label, float(cal.n_unlabelled), cal.n_unlabelled),
    ]
    for g in cal.groups:
        rows.append(("mean_pass_rate", g["group"], g["mean_pass_rate"], g["prompts"]))
        rows.append(("mean_label", g["group"], g["label_mean"], g["prompts"]))
    n = len(rows)
    return pa.table(
        {
            "run_id": [cal.run_id] * n,
            "section": [SECTION] * n,
            "metric": [r[0] for r in rows],
            "estimator": pa.nulls(n, pa.string()),
            "G": pa.nulls(n, pa.int32()),
            "band": [r[1] for r in rows],
            "k": pa.nulls(n, pa.int32()),
            "value": [None if math.isnan(r[2]) else r[2] for r in rows],
            "n_prompts": pa.array([r[3] for r in rows], pa.int64()),
        },
        schema=schema.SUMMARY,
    )


def _of_label(band: str | None, label: str) -> bool:
    return band is not None and (band == label or band.startswith(f"{label}=") or band.startswith(f"{label} in "))


def write_calibration(store: Store, cal: Calibration) -> None:
    """Put the calibration in the run's ``summary`` (replacing an earlier one of the same label)."""
    current = store.read_table("summary", {"run_id": cal.run_id})
    keep = [
        not (s == SECTION and _of_label(b, cal.label))
        for s, b in zip(current.column("section").to_pylist(), current.column("band").to_pylist(), strict=True)
    ]
    merged = pa.concat_tables([current.filter(pa.array(keep, pa.bool_())), summary_table(cal)])
    store.replace_partition("summary", merged, {"run_id": cal.run_id})


def from_summary(rows: list[dict[str, Any]], run_id: str = "") -> list[Calibration]:
    """The calibrations stored in a summary's ``calibration`` rows (one per label), for the report."""
    labels = [r["band"] for r in rows if r["metric"] == "spearman"]
    out = []
    for label in labels:
        mine = [r for r in rows if _of_label(r["band"], label)]
        get = {r["metric"]: r for r in mine if r["band"] == label}
        means = {r["band"]: r for r in mine if r["metric"] == "mean_pass_rate"}
        labels_mean = {r["band"]: r["value"] for r in mine if r["metric"] == "mean_label"}
        groups = [
            {
                "group": band,
                "label_mean": labels_mean.get(band),
                "prompts": int(r["n_prompts"] or 0),
                "mean_pass_rate": r["value"],
            }
            for band, r in means.items()
        ]

        def value(metric: str, get: dict = get) -> float:
            v = get.get(metric, {}).get("value")
            return math.nan if v is None else float(v)

        out.append(
            Calibration(
                run_id=run_id,
                label=label,
                source="stored",
                n_prompts=int(get.get("spearman", {}).get("n_prompts") or 0),
                n_unlabelled=int(get.get("unlabelled", {}).get("n_prompts") or 0),
                n_unmeasured=0,
                rho=value("spearman"),
                lo=value("spearman_lo"),
                hi=value("spearman_hi"),
                level=value("spearman_level"),
                bootstrap=0,
                groups=sorted(groups, key=lambda g: (g["label_mean"] is None, g["label_mean"])),
            )
        )
    return out

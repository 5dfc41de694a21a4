"""The training section: what training drew for this run's dataset since the profile.

From the ``observations`` table (``difficulty track``, the TRL recorder): per training source the
share of silent groups per step (all wrong and all right apart) and the pass rate per step; the
profile's prediction against what training then saw (``observe.current.profile_vs_training``); and
how many prompts moved between bands (``observe.current.moved_prompts``). Nothing is written.
"""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pyarrow.compute as pc
from pipeline.reports.charts import Charts, Section, TableView, figure, fmt, pct
from pipeline.reports.load import RunData

from pipeline import curriculum
from pipeline.observe import current
from pipeline.schema import BAND_EDGES

__all__ = ["training_section"]


def _per_step(obs: pa.Table) -> list[dict]:
    rows: dict[int, dict] = {}
    for step, n, c in zip(*(obs.column(k).to_pylist() for k in ("step", "n", "c")), strict=True):
        r = rows.setdefault(step, {"step": step, "groups": 0, "n": 0, "c": 0, "wrong": 0, "right": 0})
        r["groups"] += 1
        r["n"] += n
        r["c"] += c
        r["wrong"] += c == 0
        r["right"] += c == n
    return [rows[s] for s in sorted(rows)]


def _forecast(sec: Section, data: RunData) -> None:
    """The signal yield this profile promises a batch under uniform sampling and the default curriculum."""
    stats = data.stats.filter(data.stats["n"] > 0)
    if stats.height == 0:
        return
    batch = min(256, stats.height)
    got = curriculum.forecast(stats["n"].to_numpy(), stats["c"].to_numpy(), batch, G=data.G)
    sec.tables.append(
        TableView(
            f"Signal yield forecast at G = {data.G} (batches of {batch})",
            ["policy", "expected share of non-silent groups"],
            [
                ["uniform", pct(got["uniform"])],
                [f"{curriculum.DEFAULT_POLICY} (default curriculum)", pct(got["default"])],
                ["ratio", f"{got['ratio']:.2f}x"],
            ],
            "From this profile alone: each prompt's posterior probability that a group of G is not silent, averaged "
            "over a batch drawn uniformly or by the default curriculum policy's first choice (docs/curriculum.md). "
            "`difficulty replay LOG` measures it on a training log.",
        )
    )


def training_section(data: RunData, charts: Charts) -> Section:
    """Silent share and pass rate per training step, the profile against training, prompts that moved."""
    sec = Section(
        "training",
        "Training since the profile",
        "What the trainer's own rollouts say about this dataset's prompts, step by step, and whether this "
        "profile predicted it.",
    )
    _forecast(sec, data)
    obs = data.observations
    training = obs.filter(pc.equal(obs.column("kind"), "training")) if obs is not None and obs.num_rows else None
    if training is None or training.num_rows == 0:
        sec.notes.append(
            f"No training observations of dataset {data.run.dataset!r} yet: `difficulty track ROLLOUT_DIR "
            "--dataset ...` imports verl's rollout dumps, and the TRL recorder (docs/guide/observations.md) records "
            "a GRPOTrainer's rewards while it trains."
        )
        return sec
    profile = f"profile:{data.run_id}"
    for source in sorted(set(training.column("source").to_pylist())):
        rows = _per_step(training.filter(pc.equal(training.column("source"), source)))
        steps = [r["step"] for r in rows]
        fig = figure()
        fig.add_bar(x=steps, y=[r["wrong"] / r["groups"] for r in rows], name="all wrong")
        fig.add_bar(x=steps, y=[r["right"] / r["groups"] for r in rows], name="all right")
        fig.add_scatter(x=steps, y=[r["c"] / r["n"] for r in rows], mode="lines", name="pass rate")
        fig.update_layout(barmode="stack")
        fig.update_yaxes(range=[0, 1])
        silent = sum(r["wrong"] + r["right"] for r in rows) / sum(r["groups"] for r in rows)
        sec.charts.append(
            charts.make(
                fig,
                f"Silent groups and pass rate per step: {source}",
                "training step",
                "share",
                f"Bars: the share of the step's groups that were all wrong or all right (no learning signal); "
                f"line: the step's pass rate. Over all {len(rows)} steps {pct(silent)} of groups were silent.",
            )
        )
        if obs.filter(pc.equal(obs.column("source"), profile)).num_rows:
            sec.tables.append(_prediction_table(obs, profile, source))
    moved = current.moved_prompts(obs, current.CurrentConfig(forgetting=current.FORGETTING))
    lo, hi = BAND_EDGES  # moved_prompts' edges
    if moved.num_rows:
        kinds = Counter(zip(moved.column("before").to_pylist(), moved.column("now").to_pylist(), strict=True))
        sec.tables.append(
            TableView(
                f"Prompts that moved between bands (forgetting {current.FORGETTING:g})",
                ["from", "to", "prompts"],
                [[a, b, fmt(k)] for (a, b), k in kinds.most_common()],
                f"Band by posterior mean (hard < {lo:g} < informative < {hi:g} < easy) at a prompt's first "
                "observation and now; `difficulty current --moved` lists them.",
            )
        )
    return sec


def _prediction_table(obs: pa.Table, profile: str, source: str) -> TableView:
    """The profile's predicted pass and silent rates against what one training source saw."""
    table = current.profile_vs_training(obs, profile, source)
    return TableView(
        f"The profile's prediction against {source}",
        [
            "profile pass rate",
            "groups",
            "predicted pass",
            "observed pass",
            "predicted silent",
            "observed silent",
        ],
        [
            [
                f"{r['bin_lo']:.1f}-{r['bin_hi']:.1f}",
                fmt(r["groups"]),
                f"{pct(r['predicted_pass_rate'])} ± {pct(r['pass_rate_sd'])}",
                pct(r["observed_pass_rate"]),
                f"{pct(r['predicted_silent'])} ± {pct(r['silent_sd'])}",
                pct(r["observed_silent"]),
            ]
            for r in table.to_pylist()
        ],
        "Prompts binned by this profile's posterior mean; each training group (a prompt given two groups "
        "in a step counts two) is set against the profile's prediction for a group of its size, with its "
        "standard deviation (the groups' binomial noise and the fitted prior's uncertainty). Within about "
        "three standard deviations: the profile still describes training; beyond: the policy moved.",
    )

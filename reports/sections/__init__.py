"""The sections of a run report, one module each, built from a ``RunData``.

In report order: the run card (``run_card``), the pass-rate distribution (``pass_rates``), an
adaptive run's rounds (``rounds``), every estimator's implied weight over that distribution
(``weights``), gradient share by difficulty band (``gradient_share``), zero-signal rates against G
(``zero_signal``), rollout allocation (``allocation``), pass@k (``pass_at_k``), breakdowns by
source / domain / topic / difficulty (``breakdown``), the calibration of the dataset's difficulty
labels (``calibration``), what training drew since the profile (``training``), answer
concentration (``answers``), and prompts worth a look (``prompts``). A section whose data the run
lacks (no priors, no answers, no source column) shows a short note instead of an empty chart.
Each module imports only ``charts`` and ``load``, and ``rounds`` for its posterior note.
Definitions: ``docs/estimators.md``.
"""

from __future__ import annotations

from pipeline.reports.charts import Charts, Section
from pipeline.reports.load import ReportConfig, RunData
from pipeline.reports.sections.allocation import allocation_section
from pipeline.reports.sections.answers import answers_section
from pipeline.reports.sections.breakdown import breakdown_section
from pipeline.reports.sections.calibration import calibration_section
from pipeline.reports.sections.gradient_share import gradient_share_section
from pipeline.reports.sections.pass_at_k import pass_at_k_section
from pipeline.reports.sections.pass_rates import pass_rates_section
from pipeline.reports.sections.prompts import prompts_section
from pipeline.reports.sections.rounds import adaptive_section
from pipeline.reports.sections.run_card import run_card_section
from pipeline.reports.sections.training import training_section
from pipeline.reports.sections.weights import weights_section
from pipeline.reports.sections.zero_signal import zero_signal_section

__all__ = ["build_sections"]


def build_sections(data: RunData, cfg: ReportConfig, prefix: str = "r") -> list[Section]:
    """All eleven sections of a run report, and an adaptive run's rounds section after the pass rates."""
    charts = Charts(prefix)
    sections = [run_card_section(data), pass_rates_section(data, charts, cfg)]
    rounds = adaptive_section(data, charts)
    if rounds is not None:
        sections.append(rounds)
    return sections + [
        weights_section(data, charts, cfg),
        gradient_share_section(data, charts, cfg),
        zero_signal_section(data, charts),
        allocation_section(data, charts, cfg),
        pass_at_k_section(data, charts),
        breakdown_section(data, charts, cfg),
        calibration_section(data, charts),
        training_section(data, charts),
        answers_section(data, charts, cfg),
        prompts_section(data, cfg),
    ]

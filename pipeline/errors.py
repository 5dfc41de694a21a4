"""One base for every error a user can act on; the CLI catches ``PipelineError`` and nothing else.

A failure that belongs to one row (an empty problem, an unparsable answer, a grading timeout) is
data: it becomes a status column and the run goes on. An exception means the command cannot do
what was asked (an unknown run, an unreadable file, a bad option) and says which row or value.
"""

from __future__ import annotations


class PipelineError(RuntimeError):
    """An error the user can act on; its message names the row, file or value at fault."""


class DatasetError(PipelineError, ValueError):
    """A dataset cannot be loaded (unknown adapter, missing column, unreadable file, offline hub)."""


class SamplingError(PipelineError):
    """A sampler cannot be built or cannot sample (missing model, unknown backend, server gone)."""


class BackendUnavailableError(SamplingError):
    """A sampling server never answered: every attempt timed out or could not connect.

    Distinct from other sampling failures so that a caller (the Prefect task) can skip its own
    retries: the sampler has already retried, and a server that is down or hung will not come back
    for another try of the same shard. The message names the URL, the prompt and the attempts.
    """


class StoreError(PipelineError):
    """A storage problem (bad data directory, unknown run, unsafe partition value, bad SQL)."""


class RunRecordError(StoreError):
    """A run's registry row holds a field the pipeline cannot read back (JSON that does not parse,
    adaptive settings or a prior that are not valid). Raised where the row is decoded, so every
    reader of the run (report, CLI, the next round) stops with this one error, naming the run and
    the field."""


class DiskFullError(StoreError):
    """A write found no room on a local disk (or a used-up quota); the message says what was being
    written, the space it needs and the space left. Distinct so that the run's status write can
    use the room kept for it and try once more."""


class ReportError(PipelineError):
    """A report cannot be written (no analysis for the run, unknown option)."""


class ConfigError(PipelineError, ValueError):
    """An option or configuration value is out of range or unknown."""


class AllocationTooLargeError(ConfigError):
    """An exact allocation (dynamic programming, for a value not concave in n) would take too long
    or too much memory; the message gives its size and what to shrink."""


class MissingDependencyError(PipelineError, ImportError):
    """An optional extra is not installed; the message names the ``pip install`` that fixes it."""


class MissingFileError(PipelineError, FileNotFoundError):
    """A file the user named (a model, a checkpoint folder, a data file) does not exist."""


class OrchestrationError(PipelineError):
    """Prefect's API server did not start or stopped answering; the message says what it printed
    and how to run without it (``--no-prefect``) or against a running server (``PREFECT_API_URL``)."""

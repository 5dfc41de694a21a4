"""``python -m pipeline``: the ``difficulty`` command line."""

from pipeline.cli import app

app(prog_name="difficulty")

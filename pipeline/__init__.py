"""The difficulty pipeline: per-prompt pass rates and GRPO-family signal analysis."""

__version__ = "0.1.0"

"""Hooks into training libraries that record what a training run already computes.

- ``trl``: ``record_rewards``, a wrapper around a TRL ``GRPOTrainer`` reward function that records
  each step's per-prompt counts in the ``observations`` table. It needs no TRL import of its own:
  importing this package never imports ``trl`` or ``transformers``.
"""

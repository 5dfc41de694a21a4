"""Hooks into training libraries that record what a training run already computes.

- ``trl``: ``record_rewards``, a wrapper around a TRL ``GRPOTrainer`` reward function that records
  each step's per-prompt counts in the ``observations`` table. It needs no TRL import of its own:
  importing this package never imports ``trl`` or ``transformers``.
- ``trl_curriculum``: ``curriculum_trainer(policy, recorder)``, a ``GRPOTrainer`` subclass whose
  sampler asks a ``CurriculumPolicy`` for each step's prompts and whose reward feeds the recorded
  counts back to it; TRL is imported only when the class is built.
- ``verl_curriculum``: ``CurriculumRLHFDataset``, verl's ``RLHFDataset`` for ``data.custom_cls`` whose
  batches a policy chooses from the current difficulty in the data directory (outcomes come back
  through ``difficulty track`` of verl's rollout dumps); verl is imported only when the class is read.
"""

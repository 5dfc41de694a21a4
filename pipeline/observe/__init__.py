"""Observations: every per-prompt outcome a user already has, in one table (``observations``).

A profile run is one source (step 0); so is each training log (verl's rollout dumps, prime-rl's and
NeMo-RL's rollout folders, the TRL recorder, a generic table of counts or rewards) and each
pass-rate label a dataset ships (Big-Math's ``llama8b_solve_rate``, Skywork's ``model_difficulty``,
...). Rooms, left to right:

- ``record``: writing and reading the table (one file per source and step; a rerun adds nothing twice).
- ``match``: a source's rows to the dataset's ``prompt_id`` (by id, dataset index, problem text or a
  decoded chat prompt); what matched nothing is kept in ``unmatched`` with the reason.
- ``sources``: the readers (verl dumps, generic tables, labels).
- ``trainers``: prime-rl's and NeMo-RL's rollout folders, and which format a folder holds.
- ``audit``: a trainer's logged silent-group counters against its rollouts' 0/1 outcomes.
- ``track``: one incremental import of a source.
- ``current``: each prompt's current difficulty: a Beta posterior over all its observations, older
  steps discounted by a forgetting factor (``docs/observations.md``).
"""

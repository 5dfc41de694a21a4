"""Observations: every per-prompt outcome a user already has, in one table (``observations``).

A profile run is one source (step 0); so is each training log (verl's rollout dumps, the TRL
recorder, a generic table of counts or rewards) and each pass-rate label a dataset ships (Big-Math's
``llama8b_solve_rate``, Skywork's ``model_difficulty``, ...). Rooms, left to right:

- ``record``: writing and reading the table (one file per source and step; a rerun adds nothing twice).
- ``match``: a source's rows to the dataset's ``prompt_id`` (by id, dataset index, problem text or a
  decoded chat prompt); what matched nothing is kept in ``unmatched`` with the reason.
- ``sources``: the readers (verl dumps, generic tables, labels).
- ``current``: each prompt's current difficulty: a Beta posterior over all its observations, older
  steps discounted by a forgetting factor (``docs/observations.md``).
"""

"""A notebook as a script: a profile's numbers read from Python with `pipeline.open` (read-only).

Each `# %%` cell runs as is in Jupyter or VS Code. Usage: python examples/notebook.py [DATA_DIR]
"""

import sys

import pipeline

# %% Open the data directory: one read-only DuckDB connection over the tables of `difficulty sql`.
data = pipeline.open(sys.argv[1] if len(sys.argv) > 1 else "difficulty-data")
runs = data.runs().pl()
finished = runs.filter(runs["status"] == "done")  # a run still sampling has no analysis yet
if finished.is_empty():
    raise SystemExit(f"no finished run in {data.root}: run `difficulty profile` first")
run = finished.row(0, named=True)  # the newest finished run
print(f"run {run['run_id']}: {run['dataset']}, model {run['model']}, {run['n_prompts']} prompts, {run['status']}")

# %% Each prompt's pass rate, grouped: a group of G answers teaches nothing when all are right or all wrong.
groups = data.sql(
    """select case when c = 0 then 'all wrong' when c = n then 'all right' else 'mixed' end as answers,
              count(*) as prompts, round(avg(pass_rate), 3) as mean_pass_rate
       from prompt_stats where run_id = $run group by 1 order by 1""",
    {"run": run["run_id"]},
).pl()
print(groups)

# %% The share of silent groups at the trainer's group size G = 8, split into all-wrong and all-right
# (above the run's samples per prompt these are posterior estimates, not counts).
summary = data.analysis(run["run_id"]).summary
print(summary.filter("section = 'zero_signal' and metric like 'observed%' and G = 8").pl().select("metric", "value"))

# %% The hardest prompts with their problem text: candidates to drop, or to sample more.
hardest = data.sql(
    """select s.prompt_id, s.n, s.c, left(p.problem, 60) as problem
       from prompt_stats s join problems p using (prompt_id)
       where s.run_id = $run order by s.pass_rate, s.prompt_id limit 5""",
    {"run": run["run_id"]},
).pl()
print(hardest)
data.close()

-- Per source and step: prompts observed, groups, rollouts, pass rate, and the share of silent groups,
-- all-wrong (c = 0) and all-right (c = n) apart: training's silent share step by step. A row is one
-- group (a prompt given m groups in a step is m rows; a row without group_index counts as one group).
select
    source,
    kind,
    step,
    any_value(dataset) as dataset,
    count(distinct prompt_id) as prompts,
    count(*) as groups,
    sum(n) as rollouts,
    sum(c) / sum(n) as pass_rate,
    avg(case when c = 0 then 1.0 else 0.0 end) as silent_all_wrong,
    avg(case when c = n then 1.0 else 0.0 end) as silent_all_right,
    avg(case when c = 0 or c = n then 1.0 else 0.0 end) as silent
from observations
group by source, kind, step
order by source, step

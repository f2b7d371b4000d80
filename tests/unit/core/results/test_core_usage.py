"""mtp_core.results.core_usage: how a local run held its cores, from a Snakemake log written out by hand."""

from __future__ import annotations

import pytest

from mtp_core.results import core_usage

# a: 0-10 s, one thread (no threads line); b: 10-30 s, one thread; c: 30-40 s, two threads; d: starts at 35 s and
# never ends (the run was killed at 40 s, the log's last time)
LOG = """\
Building DAG of jobs...
Provided cores: 2
Rules claiming more threads will be scaled down.

[Wed Dec  2 02:13:24 2026]
localrule a:
    output: results/a.txt
    jobid: 3
    reason: Missing output files: results/a.txt
    resources: tmpdir=/tmp

[Wed Dec  2 02:13:34 2026]
Finished jobid: 3 (Rule: a)
1 of 4 steps (25%) done
Select jobs to execute...

[Wed Dec  2 02:13:34 2026]
rule b:
    jobid: 7
    wildcards: run=main
    priority: 10
    resources: tmpdir=/tmp

[Wed Dec  2 02:13:54 2026]
Finished jobid: 7 (Rule: b)

[Wed Dec  2 02:13:54 2026]
localrule c:
    jobid: 1
    threads: 2
    resources: tmpdir=/tmp

[Wed Dec  2 02:13:59 2026]
rule d:
    jobid: 2

[Wed Dec  2 02:14:04 2026]
Finished jobid: 1 (Rule: c)
"""


@pytest.fixture
def log(tmp_path):
    path = tmp_path / "run.snakemake.log"
    path.write_text(LOG)
    return path


def test_spans_and_cores(log):
    assert core_usage.provided_cores(log) == 2
    spans = core_usage.job_spans(log).set_index("rule")
    assert spans.loc["a", ["jobid", "threads", "start_s", "end_s", "finished"]].tolist() == [3, 1, 0, 10, True]
    assert spans.loc["b", ["wildcards", "threads", "start_s", "end_s"]].tolist() == ["run=main", 1, 10, 30]
    assert spans.loc["c", ["threads", "start_s", "end_s"]].tolist() == [2, 30, 40]
    assert spans.loc["d", ["start_s", "end_s", "finished"]].tolist() == [35, 40, False]


def test_free_stretches_and_summary(log):
    stretches = core_usage.free_stretches(core_usage.job_spans(log), 2)
    assert stretches.to_dict("records") == [
        {"start_s": 0, "seconds": 10, "held": 1, "free": 1, "jobs": "a"},
        {"start_s": 10, "seconds": 20, "held": 1, "free": 1, "jobs": "b[run=main]"},
        {"start_s": 30, "seconds": 5, "held": 2, "free": 0, "jobs": "c"},
        {"start_s": 35, "seconds": 5, "held": 2, "free": 0, "jobs": "c, d"},  # 3 threads on 2 cores: 2 held
    ]
    use = core_usage.usage_summary(stretches, 2)
    # 40 s on 2 cores: 80 core-seconds, of which held 10 + 20 + 10 + 10 = 50
    assert use == pytest.approx(
        {"elapsed_min": 40 / 60, "core_min": 80 / 60, "held_core_min": 50 / 60, "free_core_min": 30 / 60}
    )


def test_not_a_local_run(tmp_path):
    empty = tmp_path / "empty.log"
    empty.write_text("Building DAG of jobs...\n")
    with pytest.raises(ValueError, match="no 'Provided cores'"):
        core_usage.provided_cores(empty)
    with pytest.raises(ValueError, match="no job started"):
        core_usage.job_spans(empty)

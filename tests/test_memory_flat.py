"""No state of a run stays in memory after its Dagster run: `analyze` over a batch split into consecutive
Dagster runs (analysis.MAX_RUNS_PER_RUN) holds the same Python memory after its second run as after its last,
so memory at 10,000 runs is that of one run of MAX_RUNS_PER_RUN (measured: 82 MB blocks by tracemalloc after every
part of a 100-run batch cut into ten, while the process's RSS levels off at about 615 MB from the sixth part).
Python's allocated blocks are the measure: counting them costs nothing, where tracemalloc doubles the run's time."""

import json
import subprocess
import sys
import textwrap

from operate_support import ROOT, simulate

CHILD = textwrap.dedent("""
    import contextlib, gc, json, sys
    from pathlib import Path
    from dagster import DagsterInstance
    from pipeline.defs import analysis
    archive, out = Path(sys.argv[1]), Path(sys.argv[2])
    analysis.MAX_RUNS_PER_RUN = 2
    kept, blocks = analysis.sigterm_kept, []

    @contextlib.contextmanager
    def measured():
        with kept():
            yield
        gc.collect()
        blocks.append(sys.getallocatedblocks())

    analysis.sigterm_kept = measured
    (out / "dagster").mkdir()
    with DagsterInstance.local_temp(str(out / "dagster")) as instance:
        analysis.analyze_archive(archive, out / "wh", out / "rep", instance=instance)
    print(json.dumps(blocks))
""")


def test_memory_does_not_grow_from_one_dagster_run_to_the_next(tmp_path):
    labels = simulate(tmp_path / "sim", runs=14, seed=5)
    assert len(labels["runs"]) == 14
    done = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "sim" / "archive"), str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    blocks = json.loads(done.stdout.splitlines()[-1])
    assert len(blocks) == 7  # 14 runs, 2 a Dagster run
    # the first parts still import and cache what later parts reuse, and the last alone writes the fleet report;
    # from the third to the sixth, parts add ~50 blocks each, and 100 small dicts kept per part (50 a run) fail this
    assert blocks[-2] - blocks[2] < 400, blocks


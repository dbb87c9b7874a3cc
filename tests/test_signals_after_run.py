"""An in-process analysis leaves the process's SIGTERM as it found it.

Dagster gives SIGTERM SIGINT's action when an in-process run in the main thread ends. A process started with
SIGINT ignored (a shell script's background job, a CI runner) was then left ignoring SIGTERM, and so was every
process it started afterwards. Dagster stops a step's compute-log `tail` processes with SIGTERM and waits 30 s
for each of the two: steps run off the main thread of such a process (a dask worker thread, a thread pool)
each took a minute."""

import signal
import subprocess
import sys
import textwrap

from operate_support import ROOT, simulate

CHILD = textwrap.dedent("""
    import signal, subprocess, sys, time
    from pipeline.defs.analysis import analyze_archive
    archive, warehouse, reports = sys.argv[1:4]
    analyze_archive(archive, warehouse, reports, quiet_period_s=0)
    print("SIGTERM", signal.getsignal(signal.SIGTERM).name, flush=True)
    tail = subprocess.Popen(["tail", "-f", "/dev/null"])
    time.sleep(0.2)
    tail.terminate()  # what Dagster does to a step's compute-log tail
    try:
        print("tail stopped", tail.wait(timeout=5), flush=True)
    except subprocess.TimeoutExpired:
        tail.kill()
        print("tail ignored SIGTERM", flush=True)
""")


def _sigint_ignored() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def test_analysis_leaves_sigterm_as_found(tmp_path):
    simulate(tmp_path / "sim", runs=2, seed=3)
    done = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "sim" / "archive"), str(tmp_path / "wh"),
                           str(tmp_path / "reports")], cwd=ROOT, preexec_fn=_sigint_ignored, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert "SIGTERM SIG_DFL" in lines
    assert f"tail stopped {-signal.SIGTERM}" in lines

"""The tools that drive LSF, from PyPI (the ``lsf-clients`` extra), driving a real XCE cluster through
XCE's LSF commands unchanged: dask-jobqueue, snakemake's LSF executor, psij-python and parsl.

Each runs in a child process with the site's environment (LSF_ENVDIR, the commands on PATH, the
client settings), as a user's script would; what it computed or reported comes back on stdout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.long

def python(site, code: str, cwd: str, timeout: float = 240) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env={**os.environ, **site.env}, cwd=cwd,
                       capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"stdout:\n{r.stdout[-3000:]}\nstderr:\n{r.stderr[-5000:]}"
    return r


def test_dask_jobqueue_lsfcluster_scales_to_two_workers_and_sums_an_array(site, tmp_path):
    pytest.importorskip("dask_jobqueue")
    r = python(site, """
        import dask.array as da
        from dask.distributed import Client
        from dask_jobqueue import LSFCluster

        # loopback only; its default walltime goes as #BSUB -W (a run limit, kept by the run's shepherd)
        with LSFCluster(cores=1, processes=1, memory="1GiB", use_stdin=True,
                        scheduler_options={"host": "127.0.0.1"}, worker_extra_args=["--host", "127.0.0.1"],
                        log_directory="logs") as cluster:
            print("script:", cluster.job_script().replace("\\n", " | "))
            cluster.scale(jobs=2)
            with Client(cluster) as client:
                client.wait_for_workers(2, timeout=180)
                print("workers", len(client.scheduler_info()["workers"]))
                print("sum", int(da.ones((1000, 1000), chunks=(100, 100)).sum().compute()))
        print("closed")
    """, str(tmp_path))
    lines = r.stdout.splitlines()
    assert "#BSUB -M 1074" in r.stdout  # -M in the site's LSF_UNIT_FOR_LIMITS (MB), read from lsf.conf
    assert "workers 2" in lines and "sum 1000000" in lines and lines[-1] == "closed", r.stdout


def test_snakemake_runs_a_three_rule_workflow_with_the_lsf_executor(site, tmp_path):
    pytest.importorskip("snakemake_executor_plugin_lsf")
    (tmp_path / "Snakefile").write_text(textwrap.dedent("""
        rule all:
            input: "c.txt"

        rule a:
            output: "a.txt"
            resources: mem_mb=100
            shell: "echo a > {output}"

        rule b:
            input: "a.txt"
            output: "b.txt"
            shell: "cat {input} > {output}; echo b >> {output}"

        rule c:
            input: "b.txt"
            output: "c.txt"
            shell: "cat {input} > {output}; echo c >> {output}"
    """))
    r = subprocess.run([sys.executable, "-m", "snakemake", "--executor", "lsf", "--jobs", "3", "--latency-wait", "5",
                        "--default-resources", "lsf_queue=default", "lsf_project=default"],
                       env={**os.environ, **site.env}, cwd=str(tmp_path), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    assert (tmp_path / "c.txt").read_text().split() == ["a", "b", "c"]


def test_psij_reports_exit_0_and_exit_3(site, tmp_path):
    pytest.importorskip("psij")
    r = python(site, f"""
        from pathlib import Path

        from psij import Job, JobExecutor, JobSpec
        from psij.executors.batch.lsf import LsfExecutorConfig

        config = LsfExecutorConfig(work_directory=Path({str(tmp_path / "psij")!r}))
        ex = JobExecutor.get_instance("lsf", config=config)
        jobs = {{code: Job(JobSpec(executable="/bin/sh", arguments=["-c", f"exit {{code}}"],
                                   directory=Path({str(tmp_path)!r}))) for code in (0, 3)}}
        for job in jobs.values():
            ex.submit(job)
        for code, job in jobs.items():
            status = job.wait()
            print("job", code, status.state, status.exit_code)
    """, str(tmp_path))
    assert "job 0 COMPLETED 0" in r.stdout and "job 3 FAILED 3" in r.stdout, r.stdout


def test_parsl_lsf_provider_runs_two_apps(site, tmp_path):
    pytest.importorskip("parsl")
    r = python(site, f"""
        import parsl
        from parsl.config import Config
        from parsl.executors import HighThroughputExecutor
        from parsl.launchers import SimpleLauncher
        from parsl.providers import LSFProvider

        config = Config(executors=[HighThroughputExecutor(
            label="lsf", address="127.0.0.1", max_workers_per_node=1,
            provider=LSFProvider(nodes_per_block=1, init_blocks=1, max_blocks=1, walltime="00:10:00",
                                 launcher=SimpleLauncher(), worker_init="", project=None, queue="default",
                                 bsub_redirection=True))],
            run_dir={str(tmp_path / "runinfo")!r})

        @parsl.python_app
        def square(x):
            return x * x

        with parsl.load(config):
            print("results", [f.result(timeout=180) for f in (square(3), square(4))])
    """, str(tmp_path), timeout=300)
    assert "results [9, 16]" in r.stdout, r.stdout

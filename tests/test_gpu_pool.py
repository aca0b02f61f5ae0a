"""The GPU pool on a CPU: real worker processes with fake GPU indices and fake jobs.

No CUDA is needed: a worker's "GPU" is the ``CUDA_VISIBLE_DEVICES`` it was started with, and the
jobs (``tests.gpu_pool_jobs``) report it, sleep, raise, hang or kill their own process on a chosen
GPU. What these tests cannot show (real speedups on two GPUs) is the issue's GPU run.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch
from click.testing import CliRunner

from kernelopt_bot import gpu_pool
from kernelopt_bot.cli import main as kernelopt_cli
from kernelopt_bot.errors import BadInputError
from kernelopt_bot.github import cli as bot_cli
from kernelopt_bot.github.sweep import run_shard
from kernelopt_bot.gpu_pool import GpuPool, compile_threads, looks_like_gpu_failure, select_gpus
from kernelopt_bot.suite import SuiteResult, merge, run_suite
from tests.github.conftest import Harness, write_repo
from tests.github.fakes import FakeRunner
from tests.gpu_pool_jobs import fake_runner

JOBS = "tests.gpu_pool_jobs.behave"
HAS_CUDA = torch.cuda.is_available()


def _pool(gpus: list[int | None], timeout: float = 20.0, **kw: Any) -> GpuPool:
    return GpuPool(gpus, job_timeout_s=timeout, cores=kw.pop("cores", 2), **kw)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][0] != "Z"
    except OSError:
        return False


# --- the queue -------------------------------------------------------------------------------------


def test_every_job_runs_once_and_results_come_back_in_job_order(tmp_path: Path) -> None:
    jobs = [{"i": i, "sleep": 0.02 * (i % 4), "log_dir": str(tmp_path)} for i in range(12)]
    results = _pool([0, 1]).map(JOBS, jobs)
    assert [r.job_index for r in results] == list(range(12))
    assert [r.value["i"] for r in results] == list(range(12))
    assert all(r.ok and r.attempts == 1 and r.error is None for r in results)
    runs = Counter(p.name.split("-")[0] for p in tmp_path.iterdir())
    assert runs == Counter({str(i): 1 for i in range(12)})  # each job exactly once
    assert {r.gpu for r in results} == {0, 1}  # both workers took jobs from the queue
    assert results[0].gpu == 0 and results[1].gpu == 1  # the first round: job i on gpus[i]


def test_each_worker_sees_only_its_own_gpu_and_a_fair_share_of_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,7")  # indices count what we see: 0 is 5, 1 is 7
    monkeypatch.delenv(gpu_pool.COMPILE_THREADS_ENV, raising=False)
    results = _pool([0, 1], cores=2).map(JOBS, [{"i": i, "sleep": 0.05} for i in range(6)])
    for r in results:
        assert r.value["cuda"] == {0: "5", 1: "7"}[r.gpu]
        assert r.value["threads"] == r.value["inductor"] == "1"  # 2 workers on 2 cores
    assert len({r.value["pid"] for r in results}) == 2  # long-lived: one process per GPU
    cpus = {r.gpu: tuple(r.value["cpus"]) for r in results}
    assert len(cpus[0]) == len(cpus[1]) == 1 and not set(cpus[0]) & set(cpus[1])  # a core each
    assert compile_threads(16, 2) == 8 and compile_threads(4, 3) == 1 and compile_threads(1, 4) == 1


def test_the_default_worker_leaves_the_environment_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    monkeypatch.delenv(gpu_pool.COMPILE_THREADS_ENV, raising=False)
    monkeypatch.delenv(gpu_pool.INDUCTOR_THREADS_ENV, raising=False)
    [r] = _pool([None]).map(JOBS, [{"i": 0}])
    assert r.ok and r.gpu is None and r.value["cuda"] == "3" and r.value["threads"] is None
    assert r.value["cpus"] == sorted(os.sched_getaffinity(0))  # not pinned: the whole machine


def test_two_workers_run_jobs_in_parallel() -> None:
    with _pool([0, 1]) as pool:
        pool.map(JOBS, [{"i": 0}, {"i": 1}])  # both workers up before the clock starts
        start = time.monotonic()
        results = pool.map(JOBS, [{"i": i, "sleep": 1.0} for i in range(4)])
        elapsed = time.monotonic() - start
    assert all(r.ok for r in results)
    assert elapsed < 3.0, f"4 jobs of 1 s on 2 workers took {elapsed:.2f} s"
    assert Counter(r.gpu for r in results) == Counter({0: 2, 1: 2})


# --- failures ---------------------------------------------------------------------------------------


def test_a_job_that_kills_its_worker_on_gpu1_is_retried_once_on_gpu0() -> None:
    log: list[str] = []
    jobs = [{"i": 0, "sleep": 0.3}, {"i": 1, "sleep": 0.3, "on": {"1": "exit"}}, {"i": 2, "always": "raise"}]
    results = _pool([0, 1], log=log.append).map(JOBS, jobs)
    assert results[0].ok and results[0].gpu == 0 and results[0].attempts == 1
    assert results[1].ok and results[1].gpu == 0 and results[1].attempts == 2
    assert results[1].value["cuda"] == "0"
    # An ordinary exception is the job's fault: reported at once, no retry.
    assert not results[2].ok and results[2].attempts == 1 and results[2].error == "ValueError: job 2 is broken"
    assert any("gpu 1: worker died (exit code 3)" in line for line in log)


def test_a_cuda_error_on_gpu1_is_retried_on_gpu0() -> None:
    jobs = [{"i": 0, "sleep": 0.3}, {"i": 1, "on": {"1": "cuda"}}]
    results = _pool([0, 1]).map(JOBS, jobs)
    assert results[1].ok and results[1].gpu == 0 and results[1].attempts == 2
    assert looks_like_gpu_failure(RuntimeError("CUDA error: an illegal memory access was encountered"))
    assert looks_like_gpu_failure("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
    assert not looks_like_gpu_failure(ValueError("shapes do not match")) and not looks_like_gpu_failure(None)


def test_a_job_failing_on_every_gpu_is_reported_and_the_others_complete() -> None:
    jobs = [{"i": 0, "always": "exit"}, *({"i": i, "sleep": 0.1} for i in range(1, 5))]
    results = _pool([0, 1]).map(JOBS, jobs)
    bad = results[0]
    assert not bad.ok and bad.attempts == 2
    assert bad.error == "gpu 0: worker died (exit code 3); gpu 1: worker died (exit code 3)"
    assert all(r.ok for r in results[1:])


def test_a_hanging_job_is_killed_at_its_deadline_with_its_children(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    jobs = [{"i": 0, "sleep": 0.3}, {"i": 1, "on": {"1": "hang"}, "pid_file": str(pid_file)},
            {"i": 2, "always": "hang"}]
    start = time.monotonic()
    results = _pool([0, 1], timeout=1.0).map(JOBS, jobs)
    assert time.monotonic() - start < 15
    assert results[1].ok and results[1].gpu == 0 and results[1].attempts == 2
    assert not results[2].ok and results[2].attempts == 2
    assert results[2].error is not None and results[2].error.count("exceeded its 1 s deadline") == 2
    time.sleep(0.2)
    assert not _alive(int(pid_file.read_text())), "the hung job's own child outlived the deadline"


def test_with_one_gpu_a_job_past_its_deadline_is_reported_without_a_second_wait() -> None:
    start = time.monotonic()
    results = _pool([0], timeout=1.0).map(JOBS, [{"i": 0, "always": "hang"}, {"i": 1}])
    assert not results[0].ok and results[0].attempts == 1
    assert results[0].error is not None and "deadline" in results[0].error
    assert results[1].ok and results[1].attempts == 1
    assert time.monotonic() - start < 12


def test_with_one_gpu_a_crashed_job_is_retried_on_the_same_gpu_after_a_restart(tmp_path: Path) -> None:
    marker = tmp_path / "crashed"
    results = _pool([0]).map("tests.gpu_pool_jobs.crash_once", [{"marker": str(marker)}, {"marker": ""}])
    assert results[0].ok and results[0].attempts == 2 and results[0].gpu == 0
    assert results[1].ok and results[1].attempts == 1


def test_an_error_in_the_caller_still_stops_every_worker() -> None:
    pool = _pool([0, 1])

    def explode(_result: Any) -> None:
        raise KeyError("caller bug")

    with pytest.raises(KeyError):
        pool.map(JOBS, [{"i": 0}, {"i": 1, "sleep": 30}], on_result=explode)
    assert all(w.process is None for w in pool._workers)  # killed, not left running the 30 s job


# --- choosing GPUs -----------------------------------------------------------------------------------


def test_select_gpus() -> None:
    assert select_gpus("all", 4) == [0, 1, 2, 3]
    assert select_gpus("2", 4) == [0, 1]
    assert select_gpus("0,1,3", 4) == [0, 1, 3] and select_gpus(" 3, 1 ", 4) == [3, 1]
    assert select_gpus("3,", 4) == [3]
    for spec, message in [("all", "no CUDA device"), ("1", "no CUDA device"), ("0,1", "no CUDA device")]:
        with pytest.raises(BadInputError, match=message):
            select_gpus(spec, 0)
    for spec, message in [("5", "only 4 CUDA device"), ("0", "for GPU 0 alone write --gpus 0,"), ("0,4", "no GPU 4"),
                          ("1,1", "GPU 1 given twice"), ("x", "expected all"), ("0,-1", "not a GPU index"),
                          ("0,,1", "not a GPU index")]:
        with pytest.raises(BadInputError, match=message):
            select_gpus(spec, 4)
    with pytest.raises(ValueError):
        GpuPool([None, 0], job_timeout_s=1)


@pytest.mark.skipif(HAS_CUDA, reason="checks the message without CUDA")
@pytest.mark.parametrize("spec", ["all", "1"])
def test_cli_gpus_without_cuda_is_a_bad_input(tmp_path: Path, spec: str) -> None:
    result = CliRunner().invoke(kernelopt_cli, ["suite", str(tmp_path), "--out", str(tmp_path / "o"),
                                                "--gpus", spec])
    assert result.exit_code == 2 and "no CUDA device" in result.output


# --- the suite ---------------------------------------------------------------------------------------


FAKE_PROBLEM = "tests.gpu_pool_jobs.fake_problem"


def _suite(root: Path, problems: dict[str, str]) -> Path:
    entries = []
    for rel, text in problems.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
        entries.append({"path": rel, "level": int(rel[5]), "dtypes": ["fp32"]})
    (root / "suite.json").write_text(json.dumps({"problems": entries}))
    return root


def _shape(data: dict[str, Any]) -> dict[str, Any]:
    """suite.json without what legitimately differs between runs: times and the GPU."""
    problems = [{k: v for k, v in p.items() if k not in ("seconds", "gpu")} for p in data["problems"]]
    levels = {k: {f: v for f, v in row.items() if f != "optimize_seconds_median"} for k, row in data["levels"].items()}
    return {"device": data["device"], "levels": levels, "problems": problems}


def test_suite_on_two_fake_gpus_merges_like_a_sequential_run(tmp_path: Path) -> None:
    root = _suite(tmp_path / "suite", {
        "level1/a.py": "# speedup 1.25\n", "level1/b.py": "# cuda error on 1\n# speedup 1.1\n",
        "level1/c.py": "# fail\n", "level2/d.py": "# crash on 1\n", "level2/e.py": "# speedup 0.9\n",
    })
    seq = run_suite(root, tmp_path / "seq", device="cuda", job_fn=FAKE_PROBLEM, log=lambda _m: None)
    pooled = run_suite(root, tmp_path / "pool", device="cuda", job_fn=FAKE_PROBLEM, gpus=[0, 1], cores=2,
                       log=lambda _m: None)
    one = json.loads((tmp_path / "seq" / "suite.json").read_text())
    two = json.loads((tmp_path / "pool" / "suite.json").read_text())
    assert _shape(one) == _shape(two)
    assert [p["gpu"] for p in one["problems"]] == [None] * 5
    gpus = {p["slug"]: p["gpu"] for p in two["problems"]}
    assert gpus["l1_b_fp32"] == 0 and gpus["l2_d_fp32"] == 0  # failed on GPU 1, retried on GPU 0
    assert set(gpus.values()) <= {0, 1}
    assert [p.status for p in pooled.problems] == [p.status for p in seq.problems] == \
        ["ok", "ok", "failed", "ok", "ok"]
    # The same report (the fake's times are fixed), and shard merging reads the GPU back.
    assert (tmp_path / "seq" / "suite.md").read_text() == (tmp_path / "pool" / "suite.md").read_text()
    merged = merge([tmp_path / "pool"])
    assert isinstance(merged, SuiteResult) and {p.problem.slug: p.gpu for p in merged.problems} == gpus


def test_suite_problem_that_crashes_every_gpu_is_failed_with_the_reason(tmp_path: Path) -> None:
    root = _suite(tmp_path / "suite", {"level1/a.py": "# speedup 1.2\n", "level1/z.py": "# crash everywhere\n"})
    result = run_suite(root, tmp_path / "out", device="cuda", job_fn=FAKE_PROBLEM, gpus=[0, 1], cores=2,
                       log=lambda _m: None)
    crashed = next(p for p in result.problems if p.problem.path == "level1/z.py")
    assert crashed.status == "failed" and crashed.speedup is None
    assert crashed.error is not None and crashed.error.count("worker died (exit code 5)") == 2
    assert result.levels()["1"]["failed"] == 1 and result.levels()["1"]["geomean_vs_default"] is not None


def test_suite_real_problem_runner_through_a_one_worker_pool(tmp_path: Path) -> None:
    """The real ``kernelopt optimize`` subprocess from a pool worker, on a problem that fails to
    import (nothing compiles): the same verdict as the sequential run."""
    root = _suite(tmp_path / "suite", {"level1/broken.py": "raise RuntimeError('this problem is broken')\n"})
    seq = run_suite(root, tmp_path / "seq", budget=["candidates=1"], timeout_s=120, log=lambda _m: None)
    pooled = run_suite(root, tmp_path / "pool", budget=["candidates=1"], timeout_s=120, gpus=[None],
                       log=lambda _m: None)
    assert [(p.status, p.error) for p in pooled.problems] == [(p.status, p.error) for p in seq.problems]
    assert pooled.problems[0].status == "failed" and "broken" in (pooled.problems[0].error or "")
    one = json.loads((tmp_path / "seq" / "suite.json").read_text())
    two = json.loads((tmp_path / "pool" / "suite.json").read_text())
    assert _shape(one) == _shape(two)


# --- the sweep ---------------------------------------------------------------------------------------


def _result(folder: Path, base: Path) -> dict[str, Any]:
    """A result.json with its folder's own path and the run time taken out."""
    data = json.loads((folder / "result.json").read_text().replace(str(base), "<out>"))
    data.pop("seconds", None)
    return data


def test_sweep_shard_on_two_fake_gpus_writes_what_a_sequential_shard_writes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kernelopt_bot.config import load_config

    repo = write_repo(tmp_path / "repo")
    cfg = load_config(repo / ".kernelopt.yml")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    # mlp fails like a GPU on GPU 1 only; the sequential run has no GPU 1 and verifies it.
    monkeypatch.setenv("FAKE_RUNNER_PLAN", json.dumps({"other": "failed", "mlp": "cuda@1"}))
    seq = run_shard(cfg, fake_runner(repo), 1, 1, tmp_path / "seq")
    pooled = run_shard(cfg, None, 1, 1, tmp_path / "pool", gpus=[0, 1], runner_path="tests.gpu_pool_jobs.fake_runner",
                       repo_root=repo, job_timeout_s=30)
    assert [o.job.slug for o in pooled] == [o.job.slug for o in seq] == \
        ["attn.fp32", "mlp.fp32", "mlp.bf16", "other.fp32"]
    assert [o.result.status for o in pooled] == [o.result.status for o in seq] == ["ok", "ok", "ok", "failed"]
    for o in seq:
        pool_dir = tmp_path / "pool" / o.job.slug
        assert _result(pool_dir, tmp_path / "pool") == _result(o.out_dir, tmp_path / "seq")
        assert (pool_dir / "job.json").read_text() == (o.out_dir / "job.json").read_text()
        assert (pool_dir / "pack.json").is_file() == (o.out_dir / "pack.json").is_file()
    shard = json.loads((tmp_path / "pool" / "shard-1-of-1.json").read_text())
    assert shard["failed"] == ["other.fp32"]
    assert shard["gpu"]["attn.fp32"] == 0 and shard["gpu"]["mlp.bf16"] == 0 and shard["gpu"]["mlp.fp32"] == 0
    assert json.loads((tmp_path / "seq" / "shard-1-of-1.json").read_text())["gpu"] == dict.fromkeys(shard["gpu"])


def test_sweep_run_cli_with_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = write_repo(tmp_path / "repo")
    harness = Harness(tmp_path, monkeypatch, FakeRunner())
    monkeypatch.setattr(gpu_pool, "cuda_device_count", lambda: 2)
    monkeypatch.setattr(bot_cli, "RUNNER_FACTORY", fake_runner)
    monkeypatch.setenv("FAKE_RUNNER_PLAN", json.dumps({"mlp": "cuda@1"}))
    run = harness.invoke(bot_cli.sweep, ["run", "--config", str(repo / ".kernelopt.yml"), "--shard", "1/1",
                                         "--out", str(tmp_path / "out"), "--repo-root", str(repo), "--gpus", "all"])
    assert run.code == 0, run.text
    shard = json.loads((tmp_path / "out" / "shard-1-of-1.json").read_text())
    assert shard["failed"] == [] and set(shard["gpu"].values()) <= {0, 1}
    assert "4 run(s), 0 failed" in run.text
    bad = harness.invoke(bot_cli.sweep, ["run", "--config", str(repo / ".kernelopt.yml"), "--shard", "1/1",
                                         "--out", str(tmp_path / "o2"), "--repo-root", str(repo), "--gpus", "3"])
    assert bad.code == 2 and "only 2 CUDA device" in bad.text

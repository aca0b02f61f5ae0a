"""The fleet on a CPU: real ``optimize`` processes (a stand-in, ``tests.fake_optimize``, except
where the real CLI is fast enough) on fake GPU indices.

No CUDA is needed: a job's "GPU" is the ``CUDA_VISIBLE_DEVICES`` it was started with, and the
stand-in's target file says what to do on which GPU (succeed, fail, fail like a GPU, crash, hang).
What these tests cannot show (real speedups on two GPUs) is the issue's GPU run.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from kernelopt_bot import fleet, gpu_pool
from kernelopt_bot.fleet import Fleet, FleetJob, FleetResult
from kernelopt_bot.github import cli as bot_cli
from kernelopt_bot.github.runner import TargetJob, fleet_job
from kernelopt_bot.github.sweep import run_shard
from kernelopt_bot.suite import SuiteResult, merge, run_suite
from tests.fake_optimize import COMMAND, PLAN_ENV
from tests.github.conftest import Harness, write_repo
from tests.github.fakes import FakeRunner, GpuAwareRunner
from tests.helpers import EXAMPLES


def _fleet(gpus: list[int] | None, **kw: Any) -> Fleet:
    return Fleet(gpus, cores=kw.pop("cores", 2), command=COMMAND, **kw)


def _jobs(tmp: Path, *targets: str, timeout: float = 120.0) -> list[FleetJob]:
    """One job per target text, each in a folder of its own."""
    jobs = []
    for i, text in enumerate(targets):
        target = tmp / "targets" / f"t{i}.py"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        jobs.append(FleetJob(name=f"t{i}", target=str(target), dtype="fp32", out=tmp / "out" / f"t{i}",
                             timeout_s=timeout))
    return jobs


def _seen(result: FleetResult) -> dict[str, Any]:
    return json.loads((result.job.out / "seen.json").read_text())


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][0] != "Z"
    except OSError:
        return False


@pytest.fixture(autouse=True)
def _no_gpu_of_our_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv(PLAN_ENV, raising=False)


# --- handing jobs out ------------------------------------------------------------------------------


def test_every_job_runs_once_and_results_come_back_in_job_order(tmp_path: Path) -> None:
    jobs = _jobs(tmp_path, *(f"# sleep {0.02 * (i % 4)}\n" for i in range(12)))
    results = _fleet([0, 1]).run(jobs)
    assert [r.index for r in results] == list(range(12)) and [r.job for r in results] == jobs
    assert all(r.result.status == "ok" and r.attempts == 1 and r.result.error is None for r in results)
    assert [(j.out / "runs").read_text().count("\n") for j in jobs] == [1] * 12  # each job exactly once
    assert {r.gpu for r in results} == {0, 1}  # both GPUs took jobs from the queue
    assert results[0].gpu == 0 and results[1].gpu == 1  # the first round: job i on gpus[i]


def test_each_job_sees_only_its_own_gpu_and_a_fair_share_of_cores(monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,7")  # indices count what we see: 0 is 5, 1 is 7
    monkeypatch.delenv(gpu_pool.COMPILE_THREADS_ENV, raising=False)
    results = _fleet([0, 1], cores=2).run(_jobs(tmp_path, *["# sleep 0.05\n"] * 6))
    for r in results:
        seen = _seen(r)
        assert seen["cuda"] == {0: "5", 1: "7"}[r.gpu]
        assert seen["threads"] == seen["inductor"] == "1"  # 2 GPUs on 2 cores
    assert len({_seen(r)["pid"] for r in results}) == 6  # each job a process of its own
    cpus = {r.gpu: tuple(_seen(r)["cpus"]) for r in results}
    assert len(cpus[0]) == len(cpus[1]) == 1 and not set(cpus[0]) & set(cpus[1])  # a core each


def test_the_default_device_leaves_the_gpu_and_the_cores_alone(monkeypatch: pytest.MonkeyPatch,
                                                                tmp_path: Path) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    monkeypatch.delenv(gpu_pool.COMPILE_THREADS_ENV, raising=False)
    monkeypatch.delenv(gpu_pool.INDUCTOR_THREADS_ENV, raising=False)
    [r] = _fleet(None).run(_jobs(tmp_path, ""))
    seen = _seen(r)
    assert r.result.status == "ok" and r.gpu is None and seen["cuda"] == "3" and seen["threads"] is None
    assert seen["cpus"] == sorted(os.sched_getaffinity(0))  # not pinned: the whole machine


def test_a_job_keeps_only_the_secrets_it_names(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", "ghs_x")
    monkeypatch.setenv("KERNELOPT_LLM_API_KEY", "sk-x")
    monkeypatch.setenv("KERNELOPT_LLM_TIMEOUT_S", "5")
    plain, keyed = _jobs(tmp_path, "", "")
    keyed = replace(keyed, secrets=("KERNELOPT_LLM_API_KEY",))
    one, two = (set(_seen(r)["env"]) for r in _fleet(None).run([plain, keyed]))
    assert "GITHUB_TOKEN" not in one | two and "KERNELOPT_LLM_API_KEY" not in one
    assert "KERNELOPT_LLM_API_KEY" in two and "KERNELOPT_LLM_TIMEOUT_S" in one


def test_two_gpus_run_jobs_in_parallel(tmp_path: Path) -> None:
    start = time.monotonic()
    results = _fleet([0, 1]).run(_jobs(tmp_path, *["# sleep 1.0\n"] * 4))
    elapsed = time.monotonic() - start
    assert all(r.result.status == "ok" for r in results)
    assert elapsed < 3.0, f"4 jobs of 1 s on 2 GPUs took {elapsed:.2f} s"
    assert Counter(r.gpu for r in results) == Counter({0: 2, 1: 2})


# --- failures ----------------------------------------------------------------------------------------


def test_a_job_that_crashes_on_gpu1_is_retried_once_on_gpu0(tmp_path: Path) -> None:
    log: list[str] = []
    jobs = _jobs(tmp_path, "# sleep 0.3\n", "# sleep 0.3\n# crash on 1\n", "# fail\n")
    results = _fleet([0, 1], log=log.append).run(jobs)
    assert results[0].result.status == "ok" and results[0].gpu == 0 and results[0].attempts == 1
    assert results[1].result.status == "ok" and results[1].gpu == 0 and results[1].attempts == 2
    assert _seen(results[1])["cuda"] == "0"
    # An ordinary failed run is the job's own verdict: reported at once, no retry.
    assert results[2].result.status == "failed" and results[2].attempts == 1
    assert results[2].result.error == "ValueError: this problem is broken"
    assert any("t1 on gpu 1: exit code 5" in line and "retrying" in line for line in log)


def test_a_cuda_error_on_gpu1_is_retried_on_gpu0(tmp_path: Path) -> None:
    results = _fleet([0, 1]).run(_jobs(tmp_path, "# sleep 0.3\n", "# cuda error on 1\n"))
    assert results[1].result.status == "ok" and results[1].gpu == 0 and results[1].attempts == 2


def test_a_job_failing_on_every_gpu_is_reported_and_the_others_complete(tmp_path: Path) -> None:
    results = _fleet([0, 1]).run(_jobs(tmp_path, "# crash everywhere\n", *["# sleep 0.1\n"] * 4))
    bad = results[0]
    assert bad.result.status == "failed" and bad.attempts == 2
    assert bad.result.error == "gpu 0: exit code 5; gpu 1: exit code 5"
    assert json.loads((bad.job.out / "result.json").read_text())["error"] == bad.result.error  # the folder says it
    assert all(r.result.status == "ok" for r in results[1:])


def test_a_hanging_job_is_killed_at_its_deadline_with_its_children(tmp_path: Path) -> None:
    ok, hang1, hang = _jobs(tmp_path, "# sleep 0.3\n", "# hang on 1\n", "# hang everywhere\n", timeout=3.0)
    start = time.monotonic()
    results = _fleet([0, 1]).run([replace(ok, timeout_s=120.0), hang1, hang])
    assert time.monotonic() - start < 30
    assert results[1].result.status == "ok" and results[1].gpu == 0 and results[1].attempts == 2
    assert results[2].result.status == "failed" and results[2].attempts == 2
    assert (results[2].result.error or "").count("timed out after 3 s") == 2
    assert "timed out after 3 s" in (hang.out / "optimize.log").read_text()  # the log says how it ended
    time.sleep(0.2)
    assert not _alive(int((hang1.out / "child.pid").read_text())), "the hung job's own child outlived the deadline"


def test_with_one_gpu_a_job_past_its_deadline_is_reported_without_a_second_wait(tmp_path: Path) -> None:
    hang, ok = _jobs(tmp_path, "# hang everywhere\n", "", timeout=3.0)
    start = time.monotonic()
    results = _fleet([0]).run([hang, replace(ok, timeout_s=120.0)])
    assert results[0].result.status == "failed" and results[0].attempts == 1
    assert (results[0].result.error or "").startswith("timed out after 3 s")
    assert results[1].result.status == "ok" and results[1].attempts == 1
    assert time.monotonic() - start < 20


def test_with_one_gpu_a_crashed_job_is_reported_at_once(tmp_path: Path) -> None:
    """The retry goes to another GPU; with none, the crash is the answer (not a second run on the
    GPU that just failed)."""
    results = _fleet([0]).run(_jobs(tmp_path, "# crash everywhere\n", ""))
    assert results[0].result.status == "failed" and results[0].attempts == 1
    assert results[0].result.error == "exit code 5"
    assert results[1].result.status == "ok"


def test_an_error_in_the_caller_still_stops_every_job(tmp_path: Path) -> None:
    seen = tmp_path / "out" / "t1" / "seen.json"  # the slow job has started (a loaded machine is slow to)
    quick, slow = _jobs(tmp_path, f"# wait for {seen}\n", "# sleep 30\n")

    def explode(_result: Any) -> None:
        raise KeyError("caller bug")

    start = time.monotonic()
    with pytest.raises(KeyError):
        _fleet([0, 1]).run([quick, slow], on_result=explode)
    assert time.monotonic() - start < 20
    assert not _alive(json.loads((slow.out / "seen.json").read_text())["pid"])  # not left running its 30 s


def test_a_fleet_killed_outright_takes_its_running_jobs_with_it(tmp_path: Path) -> None:
    """Jobs lead sessions of their own, out of reach of a signal to the fleet's group: each dies
    with the fleet instead (a cancelled CI job must not leave optimize runs on its GPUs)."""
    [job] = _jobs(tmp_path, "# hang everywhere\n", timeout=600.0)
    script = ("import sys; from pathlib import Path; from kernelopt_bot.fleet import Fleet, FleetJob; "
              "from tests.fake_optimize import COMMAND; "
              f"Fleet(command=COMMAND).run([FleetJob('t0', {job.target!r}, 'fp32', Path({str(job.out)!r}), 600.0)])")
    root = Path(__file__).resolve().parents[1]
    fleet_process = subprocess.Popen([sys.executable, "-c", script], cwd=root,
                                     env={**os.environ, "PYTHONPATH": str(root)})
    deadline = time.monotonic() + 60
    while not (job.out / "child.pid").is_file() and time.monotonic() < deadline:
        time.sleep(0.1)
    pid = json.loads((job.out / "seen.json").read_text())["pid"]
    sleeper = int((job.out / "child.pid").read_text())
    try:
        assert _alive(pid)
        fleet_process.kill()
        fleet_process.wait()
        deadline = time.monotonic() + 10
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(pid), "the job outlived the fleet that started it"
    finally:
        for leftover in (pid, sleeper):  # the sleeper is the stand-in's own child (a real run's die with it)
            with contextlib.suppress(OSError):
                os.kill(leftover, signal.SIGKILL)


def test_a_fleet_needs_distinct_gpus() -> None:
    for gpus in ([], [0, 0]):
        with pytest.raises(ValueError):
            Fleet(gpus)


# --- the suite ---------------------------------------------------------------------------------------


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
    seq = run_suite(root, tmp_path / "seq", device="cuda", command=COMMAND, log=lambda _m: None)
    pooled = run_suite(root, tmp_path / "pool", device="cuda", command=COMMAND, gpus=[0, 1], cores=2,
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
    # The same report (the stand-in's times are fixed), and shard merging reads the GPU back.
    assert (tmp_path / "seq" / "suite.md").read_text() == (tmp_path / "pool" / "suite.md").read_text()
    merged = merge([tmp_path / "pool"])
    assert isinstance(merged, SuiteResult) and {p.problem.slug: p.gpu for p in merged.problems} == gpus


def test_suite_problem_that_crashes_every_gpu_is_failed_with_the_reason(tmp_path: Path) -> None:
    root = _suite(tmp_path / "suite", {"level1/a.py": "# speedup 1.2\n", "level1/z.py": "# crash everywhere\n"})
    result = run_suite(root, tmp_path / "out", device="cuda", command=COMMAND, gpus=[0, 1], cores=2,
                       log=lambda _m: None)
    crashed = next(p for p in result.problems if p.problem.path == "level1/z.py")
    assert crashed.status == "failed" and crashed.speedup is None
    assert crashed.error is not None and crashed.error.count("exit code 5") == 2
    assert result.levels()["1"]["failed"] == 1 and result.levels()["1"]["geomean_vs_default"] is not None


def test_suite_real_optimize_on_a_fake_gpu_gives_the_sequential_verdict(tmp_path: Path) -> None:
    """The real ``kernelopt optimize`` on a problem that fails to import (nothing compiles), one
    after another and on a (fake) GPU: the same verdict."""
    root = _suite(tmp_path / "suite", {"level1/broken.py": "raise RuntimeError('this problem is broken')\n"})
    seq = run_suite(root, tmp_path / "seq", budget=["candidates=1"], timeout_s=120, log=lambda _m: None)
    pooled = run_suite(root, tmp_path / "pool", budget=["candidates=1"], timeout_s=120, gpus=[0],
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
    monkeypatch.setattr(fleet, "OPTIMIZE", COMMAND)
    # mlp fails like a GPU on GPU 1 only; the sequential run has no GPU 1 and verifies it.
    plan = {"other": "failed", "mlp": "cuda@1"}
    monkeypatch.setenv(PLAN_ENV, json.dumps(plan))
    seq = run_shard(cfg, GpuAwareRunner(plan=plan), 1, 1, tmp_path / "seq")
    pooled = run_shard(cfg, None, 1, 1, tmp_path / "pool", gpus=[0, 1], repo_root=repo, job_timeout_s=60)
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
    monkeypatch.setattr(fleet, "OPTIMIZE", COMMAND)
    monkeypatch.setenv(PLAN_ENV, json.dumps({"mlp": "cuda@1"}))
    run = harness.invoke(bot_cli.sweep, ["run", "--config", str(repo / ".kernelopt.yml"), "--shard", "1/1",
                                         "--out", str(tmp_path / "out"), "--repo-root", str(repo), "--gpus", "all"])
    assert run.code == 0, run.text
    shard = json.loads((tmp_path / "out" / "shard-1-of-1.json").read_text())
    assert shard["failed"] == [] and set(shard["gpu"].values()) <= {0, 1}
    assert "4 run(s), 0 failed" in run.text
    bad = harness.invoke(bot_cli.sweep, ["run", "--config", str(repo / ".kernelopt.yml"), "--shard", "1/1",
                                         "--out", str(tmp_path / "o2"), "--repo-root", str(repo), "--gpus", "3"])
    assert bad.code == 2 and "only 2 CUDA device" in bad.text


def test_a_sweep_job_reaches_optimize_with_every_setting_of_its_config(tmp_path: Path) -> None:
    """What DefaultRunner gives the pipeline, the fleet gives ``kernelopt optimize`` as flags."""
    from kernelopt_bot.cli import optimize

    job = TargetJob(name="mlp", entry="models/mlp.py", dtype="bf16", device="cuda", gamma=1.05, kind="module",
                    budget={"candidates": 3, "compile_options": False, "wall_seconds": 90.5},
                    llm={"base_url": "https://llm.example/v1", "model": "m", "api_key_env": "MY_KEY"},
                    compile={"mode": "max-autotune", "config": {"coordinate_descent_tuning": True}})
    fj = fleet_job(job, tmp_path, tmp_path / "out" / job.slug, 60.0)
    params = optimize.make_context("optimize", fj.argv(())).params
    assert params["target"] == str(tmp_path.resolve() / "models/mlp.py") and params["shown_as"] == "models/mlp.py"
    assert (params["dtype"], params["device"], params["gamma"], params["kind"]) == ("bf16", "cuda", 1.05, "module")
    assert params["budget_items"] == ("candidates=3", "compile_options=false", "wall_seconds=90.5")
    assert (params["llm_base_url"], params["llm_model"], params["llm_api_key_env"]) == \
        ("https://llm.example/v1", "m", "MY_KEY")
    assert params["mode"] == "max-autotune" and params["config_items"] == ("coordinate_descent_tuning=true",)
    assert params["out_dir"] == str(tmp_path / "out" / "mlp.bf16")
    assert fj.secrets[0] == "MY_KEY" and fj.cwd == tmp_path.resolve()
    assert fleet_job(TargetJob(name="a", entry="pkg.a:factory", dtype="fp32", device=None), tmp_path, tmp_path,
                     1.0).secrets == ()  # no LLM configured: no key for optimize either


def test_a_sweep_target_of_another_kind_fails_as_bad_input_through_the_real_cli(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "kernels").mkdir(parents=True)
    shutil.copy(EXAMPLES / "gelu.py", repo / "kernels" / "t.py")  # a model file, not a helion kernel
    job = TargetJob(name="t", entry="kernels/t.py", dtype="fp32", device="cpu", kind="helion")
    [ran] = Fleet().run([fleet_job(job, repo, tmp_path / "out" / job.slug, 300.0)])
    result = ran.result
    assert result.status == "failed" and result.error_kind == "bad input" and ran.attempts == 1
    assert result.error == "error: kernels/t.py is a module target, not the helion target the config says"
    assert result.reproduce.startswith("kernelopt optimize kernels/t.py --dtype fp32 --device cpu")


def test_a_result_json_of_any_content_is_that_jobs_failure_not_the_batchs(tmp_path: Path) -> None:
    """The engine runs the target's code and can write result.json: whatever it holds is read as no
    result (that job failed), never an exception that would end every other job of the batch."""
    from kernelopt_bot.fleet import _read_result

    for content in ("[]", "null", '{"schema": "kernelopt-result/1"}', "not json", '{"schema": 1, "kernels": 5}'):
        path = tmp_path / "result.json"
        path.write_text(content)
        assert _read_result(path) is None, content

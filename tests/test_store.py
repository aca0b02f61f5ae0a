"""The store: round trips, the cache key, concurrency across processes, export/import and refusal
of files it cannot use (without touching them)."""

from __future__ import annotations

import json
import multiprocessing
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import kernelopt_bot.store.database as database
from kernelopt_bot.pack.format import Guard, LaunchConfig, PackEntry
from kernelopt_bot.result import KernelOutcome, Recommendation, RunResult
from kernelopt_bot.store import CacheHit, Store, StoreError, base_version
from kernelopt_bot.verify.verdict import GateResult, Verdict

KEY = "a" * 64
OTHER_KEY = "b" * 64
ENV = ("NVIDIA H200", "9.0", "2.11.0+cu130", "3.5.0")
HW = {"gpu": "NVIDIA H200", "cc": "9.0", "memory_gb": 141}
VERSIONS = {"torch": "2.11.0+cu130", "triton": "3.5.0"}
BUDGET = {"candidates": 8, "gpu_seconds": 600}


def make_result(
    target: str = "examples/add.py", speedup: float | None = 1.25, status: str = "ok"
) -> RunResult:
    return RunResult(
        target=target,
        name=Path(target).stem,
        device="cuda",
        dtype="fp32",
        status=status,
        error=None if status == "ok" else "boom",
        hardware=dict(HW),
        versions=dict(VERSIONS),
        baseline_ms=2.0,
        optimized_ms=1.6,
        speedup=speedup,
        kernels=[
            KernelOutcome("triton_poi_fused_add_0", "pointwise", 0.7, 1.4, 3, "accepted", 1.2, "config"),
            KernelOutcome("triton_red_fused_sum_1", "reduction", 0.3, 0.6),
        ],
        recommendations=[Recommendation("mode=max-autotune-no-cudagraphs", 1.05, True)],
        pack_entries=1,
        seconds=12.5,
        budget=dict(BUDGET),
    )


def make_entry(key: str = KEY) -> PackEntry:
    return PackEntry(
        key=key,
        kernel_name="triton_poi_fused_add_0",
        config=LaunchConfig({"XBLOCK": 256}, num_warps=4, num_stages=1),
        guard=Guard(torch="2.11.0", triton="3.5.0", gpu="NVIDIA H200", compute_capability="9.0"),
        measured={"speedup": 1.2},
    )


def make_verdict(accepted: bool) -> Verdict:
    gates = [GateResult.ok("static"), GateResult.ok("correctness"), GateResult.ok("model")]
    gates.append(
        GateResult.ok("performance", speedup=1.2) if accepted else GateResult.fail("performance", "slower")
    )
    return Verdict(KEY[:12], "c0", gates)


@pytest.fixture
def store(tmp_path: Path) -> Store:
    with Store(tmp_path / "k.db") as s:
        yield s


def new_run(s: Store, target: str = "examples/add.py", device: str = "cuda", dtype: str = "fp32") -> int:
    return s.runs.start(target, device, dtype, HW, VERSIONS, BUDGET)


def count(path: Path, table: str) -> int:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
    finally:
        conn.close()


# -- opening ---------------------------------------------------------------------------------------


def test_default_path_honours_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("KERNELOPT_DB", raising=False)
    assert Store.default_path() == Path(".kernelopt/kernelopt.db")
    monkeypatch.chdir(tmp_path)
    with Store() as s:
        assert s.path == Path(".kernelopt/kernelopt.db")
    assert (tmp_path / ".kernelopt" / "kernelopt.db").is_file()
    monkeypatch.setenv("KERNELOPT_DB", str(tmp_path / "elsewhere" / "x.db"))
    assert Store.default_path() == tmp_path / "elsewhere" / "x.db"
    with Store():
        pass
    assert (tmp_path / "elsewhere" / "x.db").is_file()


def test_open_uses_wal_busy_timeout_and_schema_version(tmp_path: Path) -> None:
    path = tmp_path / "k.db"
    with Store(path) as s:
        conn = s._connection()
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 30000
        assert s.schema_version == database.SCHEMA_VERSION
    with Store(path) as s:  # reopening an existing store changes nothing
        assert s.schema_version == database.SCHEMA_VERSION


def test_closed_store_refuses(tmp_path: Path) -> None:
    s = Store(tmp_path / "k.db")
    s.close()
    s.close()  # twice is fine
    with pytest.raises(StoreError, match="closed"):
        s.runs.recent()


def test_corrupt_file_is_a_clear_error_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "k.db"
    garbage = b"this is not sqlite \x00\xff" * 300
    path.write_bytes(garbage)
    with pytest.raises(StoreError) as info:
        Store(path)
    assert str(path) in str(info.value)
    assert info.value.exit_code == 2  # the file the user named: bad input
    assert path.read_bytes() == garbage
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k.db"]


def test_foreign_sqlite_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE runs (x)")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="not a kernelopt store") as info:
        Store(path)
    assert str(path) in str(info.value)
    assert info.value.exit_code == 2


def test_newer_schema_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "k.db"
    Store(path).close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE meta SET value = '999' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="999") as info:
        Store(path)
    assert str(path) in str(info.value)
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == "999"
    conn.close()


def test_older_schema_is_migrated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "k.db"
    with Store(path) as s:
        new_run(s)
    ran: list[int] = []

    def v1_to_v2(conn: sqlite3.Connection) -> None:
        ran.append(1)
        conn.execute("ALTER TABLE runs ADD COLUMN note TEXT")

    monkeypatch.setattr(database, "SCHEMA_VERSION", 2)
    monkeypatch.setattr(database, "MIGRATIONS", {1: v1_to_v2})
    with Store(path) as s:
        assert s.schema_version == 2
        assert len(s.runs.recent()) == 1
        assert "note" in s.runs.recent()[0]
    with Store(path):
        pass
    assert ran == [1]  # once, not on every open


def test_missing_migration_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "k.db"
    Store(path).close()
    monkeypatch.setattr(database, "SCHEMA_VERSION", 2)
    monkeypatch.setattr(database, "MIGRATIONS", {})
    with pytest.raises(StoreError, match="no migration"):
        Store(path)
    monkeypatch.undo()
    with Store(path) as s:  # the failed migration left the file at version 1
        assert s.schema_version == 1


# -- runs ------------------------------------------------------------------------------------------


def test_run_round_trip(store: Store) -> None:
    run_id = new_run(store)
    row = store.runs.get(run_id)
    assert row["status"] == "running"
    assert (row["target"], row["device"], row["dtype"]) == ("examples/add.py", "cuda", "fp32")
    assert (row["hardware"], row["versions"], row["budget"]) == (HW, VERSIONS, BUDGET)
    assert row["result"] is None and row["finished_at"] is None

    result = make_result()
    store.runs.finish(run_id, result)
    row = store.runs.get(run_id)
    assert row["status"] == "ok"
    assert row["speedup"] == 1.25 and row["seconds"] == 12.5
    assert row["finished_at"] >= row["started_at"]
    assert row["result"] == result.to_json()
    assert RunResult.from_json(row["result"]) == result


def test_unknown_run_is_an_error(store: Store) -> None:
    with pytest.raises(StoreError, match="no run 42"):
        store.runs.get(42)
    with pytest.raises(StoreError, match="no run 42"):
        store.runs.finish(42, make_result())


def test_runs_newest_first_filter_and_limit(store: Store) -> None:
    ids = [new_run(store, target=t) for t in ("a.py", "b.py", "a.py", "a.py")]
    assert [r["id"] for r in store.runs.recent()] == ids[::-1]
    assert [r["id"] for r in store.runs.recent(target="a.py")] == [ids[3], ids[2], ids[0]]
    assert [r["id"] for r in store.runs.recent(limit=2)] == [ids[3], ids[2]]
    assert store.runs.recent(target="none.py") == []


def test_latest_result_picks_newest(store: Store) -> None:
    assert store.runs.latest_result("examples/add.py", "cuda", "fp32") is None
    first, second = new_run(store), new_run(store)
    store.runs.finish(second, make_result(speedup=1.1))
    store.runs.finish(first, make_result(speedup=1.9))  # finished last: the newest result
    latest = store.runs.latest_result("examples/add.py", "cuda", "fp32")
    assert latest is not None and latest.speedup == 1.9

    failed = new_run(store)
    store.runs.finish(failed, make_result(speedup=None, status="failed"))
    assert store.runs.latest_result("examples/add.py", "cuda", "fp32").speedup == 1.9
    assert store.runs.latest_result("examples/add.py", "cuda", "fp32", ok_only=False).status == "failed"

    unfinished = new_run(store)
    assert unfinished  # started but not finished: not a result
    assert store.runs.latest_result("examples/add.py", "cuda", "fp32").speedup == 1.9
    assert store.runs.latest_result("examples/add.py", "cuda", "bf16") is None
    assert store.runs.latest_result("examples/add.py", "cpu", "fp32") is None


def test_bad_input_writes_nothing(store: Store) -> None:
    with pytest.raises(StoreError, match="hardware"):
        store.runs.start("t", "cuda", "fp32", {"x": object()}, {}, {})
    with pytest.raises(StoreError, match="target"):
        store.runs.start(None, "cuda", "fp32", {}, {}, {})  # type: ignore[arg-type]
    assert store.runs.recent() == []
    run_id = new_run(store)
    with pytest.raises(StoreError, match="speedup"):
        store.runs.record_candidate(run_id, KEY, "tuner", "c", None, None, {}, "fast")  # type: ignore[arg-type]
    with pytest.raises(StoreError, match="no run"):
        store.runs.record_candidate(run_id + 1, KEY, "tuner", "c", None, None, {}, None)
    with pytest.raises(StoreError, match="no run"):
        store.runs.record_kernel(run_id + 1, KEY, "k", "pointwise", None, None)
    assert store.runs.candidates(run_id) == [] and store.runs.kernels(run_id) == []
    # Not-a-number measurements mean "not measured".
    store.runs.record_kernel(run_id, KEY, "k", "pointwise", float("nan"), float("inf"))
    assert store.runs.kernels(run_id)[0]["share"] is None


# -- kernels and candidates ------------------------------------------------------------------------


def test_kernels_round_trip_and_update(store: Store) -> None:
    run_id = new_run(store)
    store.runs.record_kernel(run_id, OTHER_KEY, "triton_red_fused_sum_1", "reduction", 0.3, 0.6)
    store.runs.record_kernel(run_id, KEY, "triton_poi_fused_add_0", "pointwise", 0.5, 1.0)
    store.runs.record_kernel(run_id, KEY, "triton_poi_fused_add_0", "pointwise", 0.7, 1.4)
    rows = store.runs.kernels(run_id)
    assert [(r["kernel_key"], r["share"], r["time_ms"]) for r in rows] == [
        (KEY, 0.7, 1.4),
        (OTHER_KEY, 0.3, 0.6),
    ]
    assert rows[0] == {
        "run_id": run_id,
        "kernel_key": KEY,
        "name": "triton_poi_fused_add_0",
        "kind": "pointwise",
        "share": 0.7,
        "time_ms": 1.4,
    }


def test_candidates_round_trip(store: Store) -> None:
    run_id = new_run(store)
    rejected = make_verdict(accepted=False)
    c1 = store.runs.record_candidate(
        run_id, KEY, "tuner", "XBLOCK=128", None, {"kwargs": {"XBLOCK": 128}}, rejected.to_json(), None
    )
    c2 = store.runs.record_candidate(
        run_id, KEY, "coder", "vectorized", "@triton.jit\ndef k(): pass\n", None, make_verdict(True), 1.2,
        tokens=1500, cost_usd=0.02, gpu_seconds=3.5,
    )  # fmt: skip
    c3 = store.runs.record_candidate(run_id, OTHER_KEY, "tuner", "R=64", None, None, rejected, None)
    rows = store.runs.candidates(run_id)
    assert [r["id"] for r in rows] == [c1, c2, c3]
    first, second = rows[0], rows[1]
    assert first["config"] == {"kwargs": {"XBLOCK": 128}} and first["source"] is None
    assert first["verdict"] == rejected.to_json()
    assert first["accepted"] is False and first["status"] == "rejected by performance"
    assert (first["tokens"], first["cost_usd"], first["gpu_seconds"]) == (0, 0.0, 0.0)
    assert second["accepted"] is True and second["status"] == "accepted"
    assert second["source"].startswith("@triton.jit") and second["config"] is None
    assert (second["speedup"], second["tokens"], second["cost_usd"], second["gpu_seconds"]) == (
        1.2,
        1500,
        0.02,
        3.5,
    )
    assert [r["id"] for r in store.runs.candidates(run_id, KEY)] == [c1, c2]
    assert [r["id"] for r in store.runs.candidates(run_id, OTHER_KEY)] == [c3]
    assert store.runs.candidates(new_run(store)) == []


# -- verified-kernel cache -------------------------------------------------------------------------


def test_base_version() -> None:
    assert base_version("2.11.0+cu130") == "2.11.0"
    assert base_version("2.13.0.dev20250101+cpu") == "2.13.0.dev20250101"
    assert base_version("3.5.0") == "3.5.0"
    assert base_version(None) == ""


def test_cache_verified_round_trip(store: Store) -> None:
    run_id = new_run(store)
    store.cache.record_verified(KEY, *ENV, make_entry(), 1.2, run_id)
    hit = store.cache.lookup(KEY, *ENV)
    assert isinstance(hit, CacheHit)
    assert hit.kind == "verified" and hit.verified
    assert hit.entry == make_entry().to_json()
    assert PackEntry.from_json(hit.entry) == make_entry()
    assert (hit.speedup, hit.run_id) == (1.2, run_id)
    assert hit.created_at > 0
    # The local build tag never matters, on either side.
    gpu, cc, _, triton = ENV
    assert store.cache.lookup(KEY, gpu, cc, "2.11.0", triton) is not None
    assert store.cache.lookup(KEY, gpu, cc, "2.11.0+cu128", triton) is not None


@pytest.mark.parametrize(
    "field, value",
    [(0, OTHER_KEY), (1, "NVIDIA H100 80GB HBM3"), (2, "8.0"), (2, None), (3, "2.12.0+cu130"), (4, "3.6.0")],
)
def test_cache_hit_needs_every_key_field(store: Store, field: int, value: Any) -> None:
    key = [KEY, *ENV]
    store.cache.record_verified(*key, make_entry(), 1.2, None)
    assert store.cache.lookup(*key) is not None
    changed = list(key)
    changed[field] = value
    assert store.cache.lookup(*changed) is None


def test_cache_with_unknown_compute_capability(store: Store) -> None:
    gpu, _, torch_v, triton_v = ENV
    store.cache.record_verified(KEY, gpu, None, torch_v, triton_v, make_entry().to_json(), None, None)
    hit = store.cache.lookup(KEY, gpu, None, torch_v, triton_v)
    assert hit is not None and hit.speedup is None
    assert store.cache.lookup(KEY, gpu, "9.0", torch_v, triton_v) is None


def test_cache_refuses_invalid_entries(store: Store) -> None:
    with pytest.raises(StoreError, match="not"):
        store.cache.record_verified(KEY, *ENV, make_entry(OTHER_KEY), 1.2, None)
    with pytest.raises(StoreError, match="invalid pack entry"):
        store.cache.record_verified(KEY, *ENV, {"key": KEY, "kernel_name": "k"}, 1.2, None)
    with pytest.raises(StoreError, match="no run"):
        store.cache.record_verified(KEY, *ENV, make_entry(), 1.2, 99)
    assert store.cache.lookup(KEY, *ENV) is None and store.cache.history() == []


def test_latest_verified_wins_and_history_is_kept(store: Store) -> None:
    first, second = new_run(store), new_run(store)
    store.cache.record_verified(KEY, *ENV, make_entry(), 1.5, first)
    store.cache.record_verified(KEY, *ENV, make_entry(), 1.1, second)
    hit = store.cache.lookup(KEY, *ENV)
    assert (hit.speedup, hit.run_id) == (1.1, second)
    history = store.cache.history(KEY)
    assert [(h["speedup"], h["run_id"]) for h in history] == [(1.1, second), (1.5, first)]
    assert history[0]["torch"] == "2.11.0" and history[0]["cc"] == "9.0"


def test_negative_cache(store: Store) -> None:
    run_id = new_run(store)
    store.cache.record_negative(KEY, *ENV, "12 candidates, none passed correctness", run_id)
    hit = store.cache.lookup(KEY, *ENV)
    assert hit is not None and hit.kind == "negative" and not hit.verified
    assert (hit.entry, hit.speedup, hit.run_id) == (None, None, run_id)
    assert hit.reason == "12 candidates, none passed correctness"
    assert hit.entry is None
    # A verified replacement found later replaces the negative ...
    store.cache.record_verified(KEY, *ENV, make_entry(), 1.3, run_id)
    assert store.cache.lookup(KEY, *ENV).kind == "verified"
    # ... and a later fruitless search does not drop it, but is in the history.
    store.cache.record_negative(KEY, *ENV, "nothing better", run_id)
    assert store.cache.lookup(KEY, *ENV).kind == "verified"
    assert [h["kind"] for h in store.cache.history(KEY)] == ["negative", "verified", "negative"]


def test_a_withdrawn_replacement_becomes_a_negative_on_its_stack_only(store: Store) -> None:
    """The final benchmark dropped a verified entry: this GPU and stack no longer load it as
    verified (a later run would ship it again), while another GPU's verified row for the same
    kernel stays; the history keeps every write."""
    run_id = new_run(store)
    other_gpu = ("NVIDIA H100 80GB HBM3", *ENV[1:])
    store.cache.record_verified(KEY, *ENV, make_entry(), 1.05, run_id)
    store.cache.record_verified(KEY, *other_gpu, make_entry(), 1.2, run_id)
    store.cache.withdraw(KEY, *ENV, run_id)
    hit = store.cache.lookup(KEY, *ENV)
    assert hit is not None and hit.kind == "negative" and hit.entry is None
    assert "final end-to-end benchmark" in hit.reason
    assert store.cache.lookup(KEY, *other_gpu).kind == "verified"
    assert [h["kind"] for h in store.cache.history(KEY)] == ["negative", "verified", "verified"]


def test_invalidate(store: Store) -> None:
    _, _, torch_v, triton_v = ENV
    store.cache.record_verified(KEY, *ENV, make_entry(), 1.2, None)
    store.cache.record_verified(KEY, "NVIDIA A100", "8.0", torch_v, triton_v, make_entry(), 1.1, None)
    store.cache.record_negative(OTHER_KEY, *ENV, "none passed", None)
    assert store.cache.invalidate(KEY) == 2
    assert store.cache.lookup(KEY, *ENV) is None and store.cache.lookup(OTHER_KEY, *ENV) is not None
    assert store.cache.invalidate("c" * 64) == 0
    assert store.cache.invalidate() == 1
    assert store.cache.lookup(OTHER_KEY, *ENV) is None
    assert len(store.cache.history()) == 3  # the history stays


# -- experience memory -----------------------------------------------------------------------------


def test_recall_ordering(store: Store) -> None:
    gpu = "NVIDIA H200"
    old_fail = store.memory.remember(
        "pointwise", gpu, "XBLOCK=2048", "rejected by performance", 0.9, "slower"
    )
    good = store.memory.remember("pointwise", gpu, "XBLOCK=512", "accepted", 1.15, "fine", kernel_key=KEY)
    best = store.memory.remember("pointwise", gpu, "vectorize loads", "accepted", 1.4, "best so far")
    unmeasured = store.memory.remember("pointwise", gpu, "num_warps=8", "accepted", None, "interpreter mode")
    new_fail = store.memory.remember(
        "pointwise", gpu, "fuse epilogue", "rejected by correctness", None, "wrong"
    )
    store.memory.remember("reduction", gpu, "R=64", "accepted", 2.0, "other kind")
    other_gpu = store.memory.remember("pointwise", "NVIDIA A100", "XBLOCK=1024", "accepted", 3.0, "other gpu")

    rows = store.memory.recall("pointwise", gpu)
    assert [r["id"] for r in rows] == [best, good, unmeasured, new_fail, old_fail]
    assert rows[1]["kernel_key"] == KEY and rows[1]["note"] == "fine" and rows[1]["gpu"] == gpu
    assert [r["id"] for r in store.memory.recall("pointwise")] == [
        other_gpu,
        best,
        good,
        unmeasured,
        new_fail,
        old_fail,
    ]
    assert [r["id"] for r in store.memory.recall("pointwise", gpu, limit=2)] == [best, good]
    assert store.memory.recall("template") == []


# -- export / import -------------------------------------------------------------------------------


def fill(s: Store, target: str = "examples/add.py") -> int:
    run_id = new_run(s, target=target)
    s.runs.record_kernel(run_id, KEY, "triton_poi_fused_add_0", "pointwise", 0.7, 1.4)
    s.runs.record_candidate(
        run_id, KEY, "tuner", "XBLOCK=256", None, {"kwargs": {"XBLOCK": 256}}, make_verdict(True), 1.2
    )
    s.cache.record_verified(KEY, *ENV, make_entry(), 1.2, run_id)
    s.cache.record_negative(OTHER_KEY, *ENV, "none passed", run_id)
    s.memory.remember("pointwise", "NVIDIA H200", "XBLOCK=256", "accepted", 1.2, "good")
    s.runs.finish(run_id, make_result(target=target))
    return run_id


def without_time(export: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in export.items() if k != "exported_at"}


def test_export_import_round_trip_and_idempotence(tmp_path: Path) -> None:
    with Store(tmp_path / "a.db") as a, Store(tmp_path / "b.db") as b:
        fill(a)
        fill(a, target="examples/mlp.py")
        export = json.loads(json.dumps(a.transfer.export_json()))  # it is plain JSON
        assert export["format"] == "kernelopt-store" and export["schema_version"] == database.SCHEMA_VERSION
        added = b.transfer.import_json(export)
        assert (
            added == 2 + 2 + 2 + 4 + 2 + 2
        )  # runs, kernels, candidates, history, cache (shared key), memory
        assert b.transfer.import_json(export) == 0
        assert a.transfer.import_json(export) == 0
        assert without_time(b.transfer.export_json()) == without_time(export)
        # Local ids are rebuilt; everything resolves through them.
        latest = b.runs.latest_result("examples/mlp.py", "cuda", "fp32")
        assert latest == make_result(target="examples/mlp.py")
        run_id = b.runs.recent(target="examples/add.py")[0]["id"]
        assert len(b.runs.candidates(run_id, KEY)) == 1 and len(b.runs.kernels(run_id)) == 1
        assert b.cache.lookup(KEY, *ENV).run_id in {r["id"] for r in b.runs.recent()}
        assert b.cache.lookup(OTHER_KEY, *ENV).kind == "negative"
        assert len(b.memory.recall("pointwise")) == 2


def test_import_merges_two_stores(tmp_path: Path) -> None:
    with Store(tmp_path / "a.db") as a, Store(tmp_path / "b.db") as b:
        fill(a)
        fill(b, target="examples/mlp.py")  # written later: its cache rows are newer
        assert a.transfer.import_json(b.transfer.export_json()) == 1 + 1 + 1 + 2 + 2 + 1
        assert {r["target"] for r in a.runs.recent()} == {"examples/add.py", "examples/mlp.py"}
        assert a.cache.lookup(KEY, *ENV).run_id == a.runs.recent(target="examples/mlp.py")[0]["id"]
        assert len(a.cache.history()) == 4 and len(a.memory.recall("pointwise")) == 2
        # Importing the older store into the newer one keeps the newer cache rows.
        assert b.transfer.import_json(a.transfer.export_json()) == 1 + 1 + 1 + 2 + 1
        assert b.cache.lookup(KEY, *ENV).run_id == b.runs.recent(target="examples/mlp.py")[0]["id"]


def test_import_updates_a_run_finished_elsewhere(tmp_path: Path) -> None:
    with Store(tmp_path / "a.db") as a, Store(tmp_path / "b.db") as b:
        run_id = new_run(a)
        b.transfer.import_json(a.transfer.export_json())
        assert b.runs.recent()[0]["status"] == "running"
        a.runs.finish(run_id, make_result())
        assert b.transfer.import_json(a.transfer.export_json()) == 1
        assert b.runs.recent()[0]["status"] == "ok"
        b.transfer.import_json(a.transfer.export_json())
        a_run = a.runs.get(run_id)
        assert b.transfer.import_json({**b.transfer.export_json()}) == 0
        assert b.runs.recent()[0]["result"] == a_run["result"]


def test_malformed_import_changes_nothing(store: Store) -> None:
    with pytest.raises(StoreError, match="not a kernelopt-store export"):
        store.transfer.import_json({"runs": []})
    with pytest.raises(StoreError, match="schema version"):
        store.transfer.import_json({"format": "kernelopt-store", "schema_version": 999})
    fill(store)
    export = store.transfer.export_json()
    with Store(store.path.with_name("c.db")) as c:
        bad = json.loads(json.dumps(export))
        bad["memory"].append({"uid": "x"})  # incomplete row, last in the document
        with pytest.raises(StoreError, match="nothing imported"):
            c.transfer.import_json(bad)
        assert c.runs.recent() == [] and c.cache.history() == []
        orphan = json.loads(json.dumps(export))
        orphan["runs"] = []
        with pytest.raises(StoreError, match="not in the export"):
            c.transfer.import_json(orphan)
        assert c.transfer.export_json()["kernels"] == []


# -- several processes -----------------------------------------------------------------------------


def _worker(path: str, worker: int, n: int, barrier: Any) -> None:
    """One process of the concurrency test: open the (new) file at the same moment as the others
    and write as fast as it can, including to one shared cache row."""
    barrier.wait()
    with Store(path) as s:
        for i in range(n):
            run_id = s.runs.start(f"t{worker}", "cuda", "fp32", HW, VERSIONS, BUDGET)
            s.runs.record_kernel(run_id, KEY, "k", "pointwise", 0.5, 1.0)
            s.runs.record_candidate(
                run_id, KEY, "tuner", f"w{worker}-{i}", None, None, {"accepted": False}, None
            )
            s.cache.record_verified(KEY, *ENV, make_entry(), 1.0 + i, run_id)
            s.memory.remember("pointwise", "NVIDIA H200", f"w{worker}-{i}", "accepted", 1.1, "")
            s.runs.finish(run_id, make_result(target=f"t{worker}"))
            s.cache.lookup(KEY, *ENV)
            s.memory.recall("pointwise")


def test_two_processes_write_concurrently(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    workers, n = 2, 40
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(workers)
    procs = [ctx.Process(target=_worker, args=(str(path), w, n, barrier)) for w in range(workers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0] * workers
    total = workers * n
    for table in ("runs", "kernels", "candidates", "cache_history", "memory"):
        assert count(path, table) == total, table
    assert count(path, "cache") == 1
    with Store(path) as s:
        assert {r["status"] for r in s.runs.recent(limit=total)} == {"ok"}
        labels = {c["label"] for r in s.runs.recent(limit=total) for c in s.runs.candidates(r["id"])}
        assert labels == {f"w{w}-{i}" for w in range(workers) for i in range(n)}

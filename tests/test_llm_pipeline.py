"""The LLM agents inside `kernelopt optimize`, against a loopback OpenAI-compatible server."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from kernelopt_bot.pipeline import run_pipeline
from kernelopt_bot.store import Store
from tests.helpers import EXAMPLES, captured
from tests.llm_server import LLMTestServer, Step, reply
from tests.redteam import cheats

GELU = str(EXAMPLES / "gelu.py")
# The profiler's summary, asked once a run before the first plan
PROFILED = reply("One pointwise GELU kernel takes all of the model's time; it is memory-bound.")


@pytest.fixture()
def no_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNELOPT_LLM_MAX_RETRIES", "0")
    monkeypatch.setenv("KERNELOPT_LLM_TIMEOUT_S", "10")


def test_llm_candidate_goes_through_the_gates(tmp_path: Path, no_retries: None) -> None:
    source = cheats.commute_first_product(captured("gelu.py").artifact.kernels[0].source)
    with LLMTestServer() as server:
        server.script(
            PROFILED,
            reply(json.dumps({"strategy": "other", "rationale": "reorder the product"}), prompt_tokens=900,
                  completion_tokens=40),
            reply(f"Here is the kernel:\n```python\n{source}\n```\n", prompt_tokens=1500, completion_tokens=600),
            reply(json.dumps({"strategy": "other", "outcome": "passed gates 1-3", "note": "commuted product"})),
        )  # the next planner call finds the script exhausted (HTTP 500): the search must stop cleanly
        result = run_pipeline(GELU, out_dir=tmp_path / "out", store_path=tmp_path / "db",
                              budget={"candidates_per_kernel": 0},
                              llm={"base_url": server.base_url, "model": "test-model"})
        assert server.request_count >= 3
    assert result.status == "ok", result.error
    assert result.usage["used"]["llm_calls"] >= 3 and result.usage["used"]["tokens"] >= 3000
    with Store(tmp_path / "db") as store:
        run_id = store.runs.recent()[0]["id"]
        llm = [c for c in store.runs.candidates(run_id) if c["agent"] == "llm"]
    assert len(llm) == 1
    verdict = llm[0]["verdict"]
    gates = {g["name"]: g["passed"] for g in verdict["gates"]}
    assert gates["static"] and gates["correctness"] and gates["model"]


def test_unreachable_endpoint_degrades_to_the_tuner(tmp_path: Path, no_retries: None) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again when the block ends: nothing listens there
    messages: list[str] = []
    result = run_pipeline(GELU, out_dir=tmp_path / "out", store_path=tmp_path / "db",
                          budget={"candidates_per_kernel": 1},
                          llm={"base_url": f"http://127.0.0.1:{port}/v1", "model": "m"}, log=messages.append)
    assert result.status == "ok"
    assert any("LLM endpoint unavailable" in m for m in messages)
    assert result.kernels[0].candidates == 1  # the tuner's candidate still ran


def _plan_then_coded(*sources: str) -> list[Step]:
    """The planner's reply, then for each source the coder's (or repairer's) reply and the
    summarizer's note on its verdict."""
    summary = reply(json.dumps({"strategy": "other", "outcome": "x", "note": "y"}))
    replies: list[Step] = [PROFILED, reply(json.dumps({"strategy": "other", "rationale": "try"}))]
    for source in sources:
        replies += [reply(f"```python\n{source}\n```"), summary]
    return replies


def test_repair_loop_sees_each_gate_and_respects_the_candidate_budget(tmp_path: Path, no_retries: None) -> None:
    """coder -> static failure -> repairer -> correctness failure -> repairer -> passes gates 1-3."""
    original = captured("gelu.py").artifact.kernels[0].source
    static_fail = cheats.module_level(original, "import os", before_kernel=True)
    wrong = cheats.map_store(original, "tl.zeros_like({v})")
    good = cheats.commute_first_product(original)
    with LLMTestServer() as server:
        server.script(*_plan_then_coded(static_fail, wrong, good))
        messages: list[str] = []
        result = run_pipeline(GELU, out_dir=tmp_path / "out", store_path=tmp_path / "db",
                              budget={"candidates_per_kernel": 0, "candidates": 3},
                              llm={"base_url": server.base_url, "model": "test-model"}, log=messages.append)
        prompts = [r.text_of("user") for r in server.chat_requests]
    assert result.status == "ok", result.error
    log = "\n".join(messages)
    for agent in ("profiler", "planner", "coder", "repairer", "summarizer"):  # all five agents, one client
        assert f"llm {agent}: " in log, agent
    assert "One pointwise GELU kernel takes all" in prompts[1]  # the profiler's summary reached the planner
    with Store(tmp_path / "db") as store:
        llm = [c for c in store.runs.candidates(store.runs.recent()[0]["id"]) if c["agent"] == "llm"]
    statuses = [c["verdict"]["status"] for c in llm]
    assert statuses == ["rejected by static", "rejected by correctness", "passed gates 1-3; performance not measured"]
    repair_prompts = [p for p in prompts if "import os" in p or "NaN" in p or "outside rtol" in p]
    assert any("imports" in p for p in repair_prompts), "the static gate's reason reached the repairer"
    assert any("outside rtol" in p for p in repair_prompts), "the correctness gate's reason reached the repairer"
    assert result.usage["used"]["candidates"] == 3  # the budget of 3 candidates: no fourth was started


def test_candidate_budget_stops_the_agents_before_the_request(tmp_path: Path, no_retries: None) -> None:
    original = captured("gelu.py").artifact.kernels[0].source
    static_fail = cheats.module_level(original, "import os", before_kernel=True)
    with LLMTestServer() as server:
        server.script(*_plan_then_coded(static_fail, static_fail), reply("```python\n# never requested\n```"))
        result = run_pipeline(GELU, out_dir=tmp_path / "out", store_path=tmp_path / "db",
                              budget={"candidates_per_kernel": 0, "candidates": 2},
                              llm={"base_url": server.base_url, "model": "test-model"})
        sent = server.request_count
        left = server.pending
    assert result.status == "ok", result.error
    assert result.usage["used"]["candidates"] == 2
    assert sent == 6 and left == 1  # the third write was refused before it was sent

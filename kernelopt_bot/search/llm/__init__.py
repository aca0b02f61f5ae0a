"""LLM agents for the kernel search, over any OpenAI-compatible endpoint.

Construction, for the orchestrator::

    settings = LLMSettings.from_env()              # or LLMSettings(model=..., base_url=...)
    budget = Budget(max_candidates=40, max_tokens=400_000, max_gpu_s=600, max_wall_s=1800)
    agents = make_agents(settings, budget)         # one client, one budget, five agents
    plan = agents.planner.plan(kernel, profile_row, memory)

Every call can raise :class:`LLMUnavailable` (endpoint trouble, one-line reason) or
:class:`BudgetExceeded` (refused before sending); nothing else escapes for endpoint trouble.
"""

from kernelopt_bot.search.budget import Budget, BudgetExceeded
from kernelopt_bot.search.llm.agents import (
    STRATEGIES,
    Agent,
    Agents,
    CoderAgent,
    Plan,
    PlannerAgent,
    ProfilerAgent,
    RepairerAgent,
    SummarizerAgent,
    complete_module,
    local_memory_entry,
    local_profile_summary,
    make_agents,
)
from kernelopt_bot.search.llm.client import LLMClient, LLMReply, LLMUnavailable
from kernelopt_bot.search.llm.config import LLMConfigError, LLMSettings
from kernelopt_bot.search.llm.parse import extract_code, extract_json
from kernelopt_bot.search.llm.prompts import PromptTemplates, quote

__all__ = [
    "STRATEGIES",
    "Agent",
    "Agents",
    "Budget",
    "BudgetExceeded",
    "CoderAgent",
    "LLMClient",
    "LLMConfigError",
    "LLMReply",
    "LLMSettings",
    "LLMUnavailable",
    "Plan",
    "PlannerAgent",
    "ProfilerAgent",
    "PromptTemplates",
    "RepairerAgent",
    "SummarizerAgent",
    "complete_module",
    "extract_code",
    "extract_json",
    "local_memory_entry",
    "local_profile_summary",
    "make_agents",
    "quote",
]

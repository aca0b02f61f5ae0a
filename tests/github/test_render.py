"""Reports: tables, chart, and escaping of everything that came from users."""

from __future__ import annotations

from kernelopt_bot.github.render import base_context, chart, fence, md, mlabel, render, result_row
from kernelopt_bot.github.runner import TargetJob
from kernelopt_bot.result import KernelOutcome, RunResult
from tests.github.fakes import make_result

EVIL = "<img src=x onerror=alert(1)>|`x`**[link](http://evil)** @admin\n## heading"


def _job(name: str = "mlp", dtype: str = "fp32") -> TargetJob:
    return TargetJob(name=name, entry="models/mlp.py", dtype=dtype, device="cuda")


def test_md_escapes_html_markdown_mentions_and_newlines() -> None:
    out = md(EVIL)
    assert "<" not in out and ">" not in out and "\n" not in out
    assert "&lt;img" in out
    assert "\\|" in out and "\\`x\\`" in out and "\\*\\*" in out and "\\[link\\]" in out
    assert "@admin" not in out and "@\u200badmin" in out  # GitHub reads "&#64;admin" as a mention again
    assert "http://" not in out
    refs = md("see #12, acme/app#3 and www.evil.test; &amp; stays")
    assert "app#3" not in refs and "acme/app#\u200b3" in refs and "see #12" in refs  # a PR of this repo still links
    assert "www." not in refs and "www\u200b.evil" in refs
    assert len(md("x" * 1000)) <= 300


def test_fence_cannot_be_closed_by_content() -> None:
    block = fence("a ``` b ```` c", "bash")
    assert block.startswith("`````bash\n") and block.endswith("\n`````")


def test_mermaid_labels_are_safe() -> None:
    assert mlabel('a"] ; click x call evil()') == "a__ _ click x call evil__"
    c = chart([{"label": 'x"y', "speedup": 1.25}, {"label": "z", "speedup": None}])
    assert c.startswith("```mermaid\nxychart-beta") and '"x_y"' in c and "bar [1.250]" in c
    assert chart([{"label": "z", "speedup": None}]) == ""


def _evil_row() -> dict:
    r = make_result(_job(), "verified")
    r.name = EVIL
    r.kernels[0].name = "<script>alert(1)</script>"
    r.kernels[0].detail = "</details><b>owned</b>"
    bad = make_result(_job("b"), "failed")
    bad.name = "evil|name"
    bad.error = "Traceback\n::error::injected\n<b>x</b> @someone"
    return [result_row(r, why=EVIL), result_row(bad)]


def test_templates_escape_malicious_names_and_errors() -> None:
    rows = _evil_row()
    ctx = base_context(rows, head_sha="a" * 40, trigger=EVIL, proposal=None, affected={EVIL: EVIL},
                       run_url="", note="")
    for text in (render("comment.md.j2", **ctx),
                 render("summary.md.j2", **base_context(rows, title=EVIL, links=[], note=EVIL)),
                 render("pr_body.md.j2", **base_context(rows, pr_number=1, head_sha="a" * 40, base_branch=EVIL,
                                                         files=["kernelopt/packs/mlp.json"],
                                                         activation="install()", reproduce="kernelopt x"))):
        assert "<img" not in text and "<script>" not in text and "<b>" not in text
        assert "</details><b>" not in text
        assert "@admin" not in text and "@someone" not in text
        assert "\n## heading" not in text
        assert "\n::error::" not in text
        for line in text.splitlines():  # every table row still has its columns
            if line.startswith("| ") and "\\|" in line:
                assert line.count(" | ") >= 3


def test_comment_has_marker_tables_chart_and_failures() -> None:
    ok = make_result(_job(), "verified", speedup=1.3)
    bad = make_result(_job("attn"), "failed", error="CUDA OOM")
    rows = [result_row(ok, why="models/mlp.py matches paths"), result_row(bad)]
    text = render("comment.md.j2", **base_context(rows, head_sha="b" * 40, trigger="a push to #1",
                                                  proposal={"url": "https://x/pull/2", "action": "created",
                                                            "note": "", "files": None},
                                                  affected={"mlp": "models/mlp.py matches paths"},
                                                  run_url="https://x/runs/1", note=""))
    assert text.startswith("<!-- kernelopt:report -->\n### kernelopt report for bbbbbbb")
    assert "| mlp | fp32 | cuda | 1.0000 | 0.7692 | 1.300× | 0.4% | 1 | ok |" in text
    assert "| attn | fp32 | cuda |" in text and "**failed**" in text and "attn (fp32): CUDA OOM" in text
    assert "xychart-beta" in text and "https://x/pull/2" in text
    assert "| mlp fp32 | triton\\_poi\\_k0 | pointwise | 40.0% |" in text


def test_not_measured_is_said_in_words() -> None:
    r = RunResult(target="t.py", name="t", device="cpu", dtype="fp32", kernels=[KernelOutcome("k", "reduction")])
    text = render("summary.md.j2", **base_context([result_row(r)], title="t", links=[], note=""))
    assert "not measured" in text and "xychart" not in text


def test_urls_link_only_when_plain() -> None:
    from kernelopt_bot.github.render import url

    assert url("https://github.test/acme/models/pull/2") == "https://github.test/acme/models/pull/2"
    assert url("https://x/pull/1#issuecomment-5") == "https://x/pull/1#issuecomment-5"
    assert "<" not in url("(dry run) PR from x<img src=x> into y") and "&lt;img" in url("a<img>")
    assert url("javascript:alert(1)") == "javascript:alert(1)"  # plain text, not a link: md leaves it inert


def test_a_training_steps_pr_body_shows_its_forward_and_backward() -> None:
    r = make_result(_job(), "verified")
    r.train = True
    r.kernels[0].phase = "backward"
    r.step_split_ms = {"forward": {"baseline": 1.0, "optimized": 0.95}, "backward": {"baseline": 2.0, "optimized": 1.6}}
    body = render("pr_body.md.j2", **base_context([result_row(r)], pr_number=1, head_sha="a" * 40, base_branch="main",
                                                   files=["kernelopt/packs/mlp.json"], activation="install()",
                                                   reproduce="kernelopt x"))
    assert "| mlp (training step) | fp32 |" in body
    assert "| mlp fp32 (training step) | backward | 2.0000 | 1.6000 | 1.250× |" in body, body
    assert "(backward) |" in body

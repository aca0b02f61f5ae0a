"""A loopback GitHub REST server with state, for driving the real PyGithub client in tests.

It speaks exactly the subset the bot uses (repos, branches, git refs/trees/commits/blobs,
contents, pulls, issue comments, reactions, labels, review requests, collaborator permission,
PR files), keeps state in memory so tests can assert on it, logs every request, and injects
faults: the next N requests matching a method and path pattern answer 5xx, or 403 with the
rate-limit headers GitHub sends.

Runs on 127.0.0.1 on an ephemeral port in a daemon thread; :meth:`GitHubServer.stop` ends it.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import itertools
import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

BOT_USER = {"login": "kernelopt-bot[bot]", "id": 9000, "type": "Bot"}


def _sha(*parts: str) -> str:
    return hashlib.sha1("\0".join(parts).encode()).hexdigest()


@dataclass
class Fault:
    method: str
    pattern: re.Pattern[str]
    status: int
    remaining: int
    rate_limit: bool = False
    after: bool = False  # the request takes effect, then the answer is the error (a write GitHub made)


@dataclass
class State:
    """Everything the server knows. Trees are flat: full path -> blob sha."""

    owner: str = "acme"
    name: str = "models"
    default_branch: str = "main"
    blobs: dict[str, str] = field(default_factory=dict)
    trees: dict[str, dict[str, str]] = field(default_factory=dict)
    commits: dict[str, dict[str, Any]] = field(default_factory=dict)
    refs: dict[str, str] = field(default_factory=dict)  # "heads/main" -> sha
    pulls: dict[int, dict[str, Any]] = field(default_factory=dict)
    issues: dict[int, dict[str, Any]] = field(default_factory=dict)
    comments: dict[int, dict[str, Any]] = field(default_factory=dict)
    reactions: dict[int, list[str]] = field(default_factory=dict)
    permissions: dict[str, str] = field(default_factory=dict)
    pull_files: dict[int, list[str]] = field(default_factory=dict)
    log: list[tuple[str, str]] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    ids: Any = field(default_factory=lambda: itertools.count(1000))
    numbers: Any = field(default_factory=lambda: itertools.count(1))

    @property
    def full_name(self) -> str:
        return f"{self.owner}/{self.name}"

    # --- git objects ---------------------------------------------------------------------------
    def blob(self, content: str) -> str:
        sha = _sha("blob", content)
        self.blobs[sha] = content
        return sha

    def tree(self, files: dict[str, str]) -> str:
        sha = _sha("tree", json.dumps(sorted(files.items())))
        self.trees[sha] = dict(files)
        return sha

    def commit(self, message: str, tree: str, parents: list[str]) -> str:
        sha = _sha("commit", message, tree, *parents, str(next(self.ids)))
        self.commits[sha] = {"message": message, "tree": tree, "parents": parents}
        return sha

    def commit_files(self, branch: str, files: dict[str, str], message: str = "change") -> str:
        """Test helper: a commit on ``branch`` adding/replacing ``files`` (creates the branch)."""
        parent = self.refs.get(f"heads/{branch}")
        base = dict(self.trees[self.commits[parent]["tree"]]) if parent else {}
        base.update({p: self.blob(c) for p, c in files.items()})
        sha = self.commit(message, self.tree(base), [parent] if parent else [])
        self.refs[f"heads/{branch}"] = sha
        return sha

    def files_at(self, ref: str) -> dict[str, str]:
        sha = self.refs.get(f"heads/{ref}", ref)
        tree = self.trees[self.commits[sha]["tree"]]
        return {p: self.blobs[b] for p, b in tree.items()}

    # --- PRs --------------------------------------------------------------------------------------
    def open_pull(self, head_ref: str, base_ref: str, *, title: str = "change", user: str = "alice",
                  head_repo: str | None = None, head_sha: str | None = None, body: str = "",
                  draft: bool = False) -> int:
        """Test helper: a PR as if a person opened it."""
        number = next(self.numbers)
        self.pulls[number] = {
            "number": number, "state": "open", "title": title, "body": body, "draft": draft,
            "head_ref": head_ref, "head_repo": head_repo or self.full_name,
            "head_sha": head_sha or self.refs[f"heads/{head_ref}"], "base_ref": base_ref,
            "user": {"login": user, "id": 1, "type": "User"}, "labels": [], "reviewers": [],
        }
        self.issues[number] = {"number": number, "title": title, "pull": True}
        return number

    def pulls_from(self, head_ref: str) -> list[dict[str, Any]]:
        return [p for p in self.pulls.values() if p["head_ref"] == head_ref and p["head_repo"] == self.full_name]

    def add_comment(self, number: int, body: str, user: dict[str, Any] | None = None) -> int:
        cid = next(self.ids)
        self.comments[cid] = {"id": cid, "issue": number, "body": body, "user": user or BOT_USER}
        return cid

    def add_commit(self, sha: str, files: dict[str, str], parents: list[str], message: str = "mirrored") -> str:
        """Test helper: a commit under a given SHA (one made by real git in a local checkout)."""
        self.commits[sha] = {"message": message, "tree": self.tree({p: self.blob(c) for p, c in files.items()}),
                             "parents": list(parents)}
        return sha

    def comments_on(self, number: int) -> list[dict[str, Any]]:
        return [c for c in self.comments.values() if c["issue"] == number]


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return

    def _reply(self, status: int, data: Any = None, headers: dict[str, str] | None = None) -> None:
        body = b"" if data is None else json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if body:
            self.wfile.write(body)

    def _handle(self, method: str) -> None:
        parsed = urlparse(self.path)
        path = unquote(parsed.path)
        query = {k: v[-1] for k, v in parse_qs(parsed.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            payload = json.loads(raw) if raw else {}
        except ValueError:
            self._reply(400, {"message": "Problems parsing JSON"})
            return
        srv = self.server
        with srv.lock:
            srv.state.log.append((method, path))
            for fault in srv.state.faults:
                if fault.remaining > 0 and fault.method in (method, "*") and fault.pattern.search(path):
                    fault.remaining -= 1
                    if fault.after:
                        with contextlib.suppress(KeyError):
                            srv.api.dispatch(method, path, query, payload)
                    if fault.rate_limit:
                        self._reply(403, {"message": "API rate limit exceeded for installation.",
                                          "documentation_url": "https://docs.github.com/rest/rate-limit"},
                                    {"X-RateLimit-Limit": "5000", "X-RateLimit-Remaining": "0",
                                     "X-RateLimit-Used": "5000", "X-RateLimit-Reset": str(int(time.time()) + 3600),
                                     "X-RateLimit-Resource": "core"})
                    else:
                        self._reply(fault.status, {"message": "Server Error"})
                    return
            try:
                status, data = srv.api.dispatch(method, path, query, payload)
            except KeyError as exc:
                status, data = 404, {"message": f"Not Found ({exc})"}
        self._reply(status, data)

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_DELETE(self) -> None:
        self._handle("DELETE")


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, api: Api) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.api = api
        self.state = api.state
        self.lock = threading.Lock()


Route = tuple[str, re.Pattern[str], Callable[..., tuple[int, Any]]]


class Api:
    """The REST subset, as JSON in and out. ``dispatch`` runs under the server's lock."""

    def __init__(self, state: State) -> None:
        self.state = state
        self.base = ""
        r = f"/repos/{re.escape(state.owner)}/{re.escape(state.name)}"
        self.repo_url = ""
        self.routes: list[Route] = [
            ("GET", re.compile(f"^{r}$"), self.get_repo),
            ("GET", re.compile(f"^{r}/branches/(?P<branch>.+)$"), self.get_branch),
            ("GET", re.compile(f"^{r}/git/ref/(?P<ref>.+)$"), self.get_ref),
            ("GET", re.compile(f"^{r}/git/refs/(?P<ref>.+)$"), self.get_ref),
            ("POST", re.compile(f"^{r}/git/refs$"), self.create_ref),
            ("PATCH", re.compile(f"^{r}/git/refs/(?P<ref>.+)$"), self.update_ref),
            ("DELETE", re.compile(f"^{r}/git/refs/(?P<ref>.+)$"), self.delete_ref),
            ("GET", re.compile(f"^{r}/git/commits/(?P<sha>[0-9a-f]+)$"), self.get_commit),
            ("POST", re.compile(f"^{r}/git/commits$"), self.create_commit),
            ("GET", re.compile(f"^{r}/git/trees/(?P<sha>[0-9a-f]+)$"), self.get_tree),
            ("POST", re.compile(f"^{r}/git/trees$"), self.create_tree),
            ("POST", re.compile(f"^{r}/git/blobs$"), self.create_blob),
            ("GET", re.compile(f"^{r}/git/blobs/(?P<sha>[0-9a-f]+)$"), self.get_blob),
            ("GET", re.compile(f"^{r}/contents/(?P<path>.+)$"), self.get_contents),
            ("GET", re.compile(f"^{r}/pulls$"), self.list_pulls),
            ("POST", re.compile(f"^{r}/pulls$"), self.create_pull),
            ("GET", re.compile(f"^{r}/pulls/(?P<n>\\d+)$"), self.get_pull),
            ("PATCH", re.compile(f"^{r}/pulls/(?P<n>\\d+)$"), self.edit_pull),
            ("GET", re.compile(f"^{r}/pulls/(?P<n>\\d+)/files$"), self.pull_files),
            ("POST", re.compile(f"^{r}/pulls/(?P<n>\\d+)/requested_reviewers$"), self.request_reviewers),
            ("GET", re.compile(f"^{r}/issues/comments/(?P<id>\\d+)$"), self.get_comment),
            ("PATCH", re.compile(f"^{r}/issues/comments/(?P<id>\\d+)$"), self.edit_comment),
            ("POST", re.compile(f"^{r}/issues/comments/(?P<id>\\d+)/reactions$"), self.create_reaction),
            ("GET", re.compile(f"^{r}/issues/(?P<n>\\d+)$"), self.get_issue),
            ("GET", re.compile(f"^{r}/issues/(?P<n>\\d+)/comments$"), self.list_comments),
            ("POST", re.compile(f"^{r}/issues/(?P<n>\\d+)/comments$"), self.create_comment),
            ("POST", re.compile(f"^{r}/issues/(?P<n>\\d+)/labels$"), self.add_labels),
            ("GET", re.compile(f"^{r}/collaborators/(?P<login>[^/]+)/permission$"), self.permission),
        ]

    def dispatch(self, method: str, path: str, query: dict[str, str], payload: Any) -> tuple[int, Any]:
        known_path = False
        for m, pattern, fn in self.routes:
            match = pattern.match(path)
            if match:
                known_path = True
                if m == method:
                    return fn(query=query, payload=payload, **match.groupdict())
        return (405 if known_path else 404), {"message": "Not Found" if not known_path else "Method Not Allowed"}

    # --- JSON shapes -----------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"{self.base}/repos/{self.state.full_name}"

    def repo_json(self, full_name: str | None = None) -> dict[str, Any]:
        full = full_name or self.state.full_name
        owner, name = full.split("/", 1)
        return {"id": 1 if full == self.state.full_name else 2, "name": name, "full_name": full,
                "owner": {"login": owner, "id": 3, "type": "Organization"}, "private": False,
                "default_branch": self.state.default_branch, "url": f"{self.base}/repos/{full}",
                "html_url": f"https://github.test/{full}", "fork": full != self.state.full_name}

    def commit_json(self, sha: str) -> dict[str, Any]:
        c = self.state.commits[sha]
        person = {"name": "bot", "email": "bot@example.com", "date": "2026-01-01T00:00:00Z"}
        return {"sha": sha, "url": f"{self.url}/git/commits/{sha}", "message": c["message"],
                "tree": {"sha": c["tree"], "url": f"{self.url}/git/trees/{c['tree']}"},
                "parents": [{"sha": p, "url": f"{self.url}/git/commits/{p}"} for p in c["parents"]],
                "author": person, "committer": person}

    def ref_json(self, ref: str) -> dict[str, Any]:
        sha = self.state.refs[ref]
        return {"ref": f"refs/{ref}", "node_id": ref, "url": f"{self.url}/git/refs/{ref}",
                "object": {"sha": sha, "type": "commit", "url": f"{self.url}/git/commits/{sha}"}}

    def pull_json(self, p: dict[str, Any]) -> dict[str, Any]:
        n = p["number"]
        base_sha = self.state.refs.get(f"heads/{p['base_ref']}", "")
        return {
            "id": 100 + n, "number": n, "state": p["state"], "title": p["title"], "body": p["body"],
            "draft": p["draft"], "merged": False, "user": p["user"],
            "url": f"{self.url}/pulls/{n}", "html_url": f"https://github.test/{self.state.full_name}/pull/{n}",
            "issue_url": f"{self.url}/issues/{n}",
            "head": {"ref": p["head_ref"], "sha": p["head_sha"], "label": f"{p['head_repo'].split('/')[0]}:{p['head_ref']}",
                     "repo": self.repo_json(p["head_repo"])},
            "base": {"ref": p["base_ref"], "sha": base_sha, "label": f"{self.state.owner}:{p['base_ref']}",
                     "repo": self.repo_json()},
            "labels": [{"name": lb} for lb in p["labels"]],
        }

    def comment_json(self, c: dict[str, Any]) -> dict[str, Any]:
        return {"id": c["id"], "body": c["body"], "user": c["user"], "url": f"{self.url}/issues/comments/{c['id']}",
                "html_url": f"https://github.test/{self.state.full_name}/pull/{c['issue']}#issuecomment-{c['id']}",
                "issue_url": f"{self.url}/issues/{c['issue']}", "created_at": "2026-01-01T00:00:00Z",
                "updated_at": "2026-01-01T00:00:00Z"}

    # --- handlers --------------------------------------------------------------------------------
    def get_repo(self, **_: Any) -> tuple[int, Any]:
        return 200, self.repo_json()

    def get_branch(self, branch: str, **_: Any) -> tuple[int, Any]:
        sha = self.state.refs.get(f"heads/{branch}")
        if sha is None:
            return 404, {"message": "Branch not found"}
        return 200, {"name": branch, "protected": False,
                     "commit": {"sha": sha, "url": f"{self.url}/commits/{sha}", "commit": self.commit_json(sha)}}

    def get_ref(self, ref: str, **_: Any) -> tuple[int, Any]:
        if ref not in self.state.refs:
            return 404, {"message": "Not Found"}
        return 200, self.ref_json(ref)

    def create_ref(self, payload: dict[str, Any], **_: Any) -> tuple[int, Any]:
        ref = str(payload.get("ref", ""))
        sha = str(payload.get("sha", ""))
        if not ref.startswith("refs/") or sha not in self.state.commits:
            return 422, {"message": "Reference update failed"}
        short = ref[len("refs/"):]
        if short in self.state.refs:
            return 422, {"message": "Reference already exists"}
        self.state.refs[short] = sha
        return 201, self.ref_json(short)

    def update_ref(self, ref: str, payload: dict[str, Any], **_: Any) -> tuple[int, Any]:
        if ref not in self.state.refs:
            return 422, {"message": "Reference does not exist"}
        sha = str(payload.get("sha", ""))
        if sha not in self.state.commits:
            return 422, {"message": "Object does not exist"}
        if not payload.get("force") and not self._descends(sha, self.state.refs[ref]):
            return 422, {"message": "Update is not a fast forward"}
        self.state.refs[ref] = sha
        return 200, self.ref_json(ref)

    def _descends(self, sha: str, ancestor: str) -> bool:
        todo = [sha]
        while todo:
            s = todo.pop()
            if s == ancestor:
                return True
            todo.extend(self.state.commits.get(s, {}).get("parents", []))
        return False

    def delete_ref(self, ref: str, **_: Any) -> tuple[int, Any]:
        if self.state.refs.pop(ref, None) is None:
            return 422, {"message": "Reference does not exist"}
        return 204, None

    def get_commit(self, sha: str, **_: Any) -> tuple[int, Any]:
        if sha not in self.state.commits:
            return 404, {"message": "Not Found"}
        return 200, self.commit_json(sha)

    def create_commit(self, payload: dict[str, Any], **_: Any) -> tuple[int, Any]:
        tree = payload.get("tree")
        parents = payload.get("parents") or []
        if tree not in self.state.trees or any(p not in self.state.commits for p in parents):
            return 422, {"message": "Tree or parent SHA does not exist"}
        sha = self.state.commit(str(payload.get("message", "")), tree, list(parents))
        return 201, self.commit_json(sha)

    def get_tree(self, sha: str, **_: Any) -> tuple[int, Any]:
        if sha not in self.state.trees:
            return 404, {"message": "Not Found"}
        return 200, {"sha": sha, "url": f"{self.url}/git/trees/{sha}", "truncated": False, "tree": [
            {"path": p, "mode": "100644", "type": "blob", "sha": b} for p, b in sorted(self.state.trees[sha].items())]}

    def create_tree(self, payload: dict[str, Any], **_: Any) -> tuple[int, Any]:
        base = payload.get("base_tree")
        if base is not None and base not in self.state.trees:
            return 422, {"message": "base_tree is not a valid tree"}
        files = dict(self.state.trees[base]) if base else {}
        for el in payload.get("tree") or []:
            path = el.get("path")
            if not isinstance(path, str) or not path or path.startswith("/"):
                return 422, {"message": f"bad path {path!r}"}
            if "content" in el:
                files[path] = self.state.blob(str(el["content"]))
            elif "sha" in el and el["sha"] is None:
                files.pop(path, None)
            elif el.get("sha") in self.state.blobs:
                files[path] = el["sha"]
            else:
                return 422, {"message": "tree entry needs content or a blob sha"}
        sha = self.state.tree(files)
        return 201, {"sha": sha, "url": f"{self.url}/git/trees/{sha}", "tree": [
            {"path": p, "mode": "100644", "type": "blob", "sha": b} for p, b in sorted(files.items())]}

    def create_blob(self, payload: dict[str, Any], **_: Any) -> tuple[int, Any]:
        content = str(payload.get("content", ""))
        if payload.get("encoding") == "base64":
            content = base64.b64decode(content).decode()
        sha = self.state.blob(content)
        return 201, {"sha": sha, "url": f"{self.url}/git/blobs/{sha}"}

    def get_blob(self, sha: str, **_: Any) -> tuple[int, Any]:
        if sha not in self.state.blobs:
            return 404, {"message": "Not Found"}
        data = self.state.blobs[sha].encode()
        return 200, {"sha": sha, "encoding": "base64", "content": base64.b64encode(data).decode(), "size": len(data)}

    def get_contents(self, path: str, query: dict[str, str], **_: Any) -> tuple[int, Any]:
        ref = query.get("ref", self.state.default_branch)
        sha = self.state.refs.get(f"heads/{ref}", ref)
        if sha not in self.state.commits:
            return 404, {"message": "No commit found for the ref"}
        tree = self.state.trees[self.state.commits[sha]["tree"]]
        if path not in tree:
            return 404, {"message": "Not Found"}
        blob = tree[path]
        data = self.state.blobs[blob].encode()
        return 200, {"type": "file", "encoding": "base64", "content": base64.b64encode(data).decode(),
                     "size": len(data), "name": path.rsplit("/", 1)[-1], "path": path, "sha": blob,
                     "url": f"{self.url}/contents/{path}?ref={ref}"}

    def list_pulls(self, query: dict[str, str], **_: Any) -> tuple[int, Any]:
        state = query.get("state", "open")
        head = query.get("head")
        out = []
        for p in sorted(self.state.pulls.values(), key=lambda p: p["number"]):
            if state != "all" and p["state"] != state:
                continue
            if head is not None:
                owner, _, ref = head.partition(":")
                if p["head_ref"] != ref or p["head_repo"].split("/")[0] != owner:
                    continue
            if query.get("base") and p["base_ref"] != query["base"]:
                continue
            out.append(self.pull_json(p))
        return 200, out

    def create_pull(self, payload: dict[str, Any], **_: Any) -> tuple[int, Any]:
        head, base = str(payload.get("head", "")), str(payload.get("base", ""))
        head_ref = head.split(":", 1)[-1]
        if f"heads/{head_ref}" not in self.state.refs:
            return 422, {"message": "Validation Failed", "errors": [{"field": "head", "code": "invalid"}]}
        if f"heads/{base}" not in self.state.refs:
            return 422, {"message": "Validation Failed", "errors": [{"field": "base", "code": "invalid"}]}
        if any(p["state"] == "open" for p in self.state.pulls_from(head_ref)):
            return 422, {"message": f"A pull request already exists for {self.state.owner}:{head_ref}."}
        number = self.state.open_pull(head_ref, base, title=str(payload.get("title", "")), user=BOT_USER["login"],
                                      body=str(payload.get("body") or ""), draft=bool(payload.get("draft")))
        self.state.pulls[number]["user"] = BOT_USER
        return 201, self.pull_json(self.state.pulls[number])

    def get_pull(self, n: str, **_: Any) -> tuple[int, Any]:
        return 200, self.pull_json(self.state.pulls[int(n)])

    def edit_pull(self, n: str, payload: dict[str, Any], **_: Any) -> tuple[int, Any]:
        p = self.state.pulls[int(n)]
        for key in ("title", "body", "state"):
            if key in payload:
                if key == "state" and payload[key] not in ("open", "closed"):
                    return 422, {"message": "Validation Failed"}
                p[key] = payload[key]
        if "base" in payload:
            p["base_ref"] = payload["base"]
        return 200, self.pull_json(p)

    def pull_files(self, n: str, **_: Any) -> tuple[int, Any]:
        files = self.state.pull_files.get(int(n), [])
        return 200, [{"sha": _sha(f), "filename": f, "status": "modified", "additions": 1, "deletions": 0,
                      "changes": 1, "patch": "@@ -1 +1 @@"} for f in files]

    def request_reviewers(self, n: str, payload: dict[str, Any], **_: Any) -> tuple[int, Any]:
        p = self.state.pulls[int(n)]
        p["reviewers"].extend(payload.get("reviewers") or [])
        return 201, self.pull_json(p)

    def get_issue(self, n: str, **_: Any) -> tuple[int, Any]:
        number = int(n)
        issue = self.state.issues[number]
        data = {"id": 500 + number, "number": number, "title": issue["title"], "state": "open",
                "url": f"{self.url}/issues/{number}", "html_url": f"https://github.test/{self.state.full_name}/issues/{number}",
                "user": {"login": "alice", "id": 1, "type": "User"}, "labels": [], "comments": 0}
        if issue.get("pull"):
            data["pull_request"] = {"url": f"{self.url}/pulls/{number}"}
        return 200, data

    def list_comments(self, n: str, **_: Any) -> tuple[int, Any]:
        number = int(n)
        if number not in self.state.issues:
            return 404, {"message": "Not Found"}
        return 200, [self.comment_json(c) for c in self.state.comments_on(number)]

    def create_comment(self, n: str, payload: dict[str, Any], **_: Any) -> tuple[int, Any]:
        number = int(n)
        if number not in self.state.issues:
            return 404, {"message": "Not Found"}
        cid = self.state.add_comment(number, str(payload.get("body", "")))
        return 201, self.comment_json(self.state.comments[cid])

    def get_comment(self, id: str, **_: Any) -> tuple[int, Any]:
        return 200, self.comment_json(self.state.comments[int(id)])

    def edit_comment(self, id: str, payload: dict[str, Any], **_: Any) -> tuple[int, Any]:
        c = self.state.comments[int(id)]
        if c["user"]["login"] != BOT_USER["login"]:
            return 403, {"message": "Resource not accessible by integration"}
        c["body"] = str(payload.get("body", ""))
        return 200, self.comment_json(c)

    def create_reaction(self, id: str, payload: dict[str, Any], **_: Any) -> tuple[int, Any]:
        cid = int(id)
        if cid not in self.state.comments:
            return 404, {"message": "Not Found"}
        content = payload.get("content")
        if content not in ("+1", "-1", "laugh", "confused", "heart", "hooray", "rocket", "eyes"):
            return 422, {"message": "Validation Failed"}
        self.state.reactions.setdefault(cid, []).append(content)
        return 201, {"id": next(self.state.ids), "content": content, "user": BOT_USER,
                     "created_at": "2026-01-01T00:00:00Z"}

    def add_labels(self, n: str, payload: Any, **_: Any) -> tuple[int, Any]:
        p = self.state.pulls[int(n)]
        labels = payload.get("labels") if isinstance(payload, dict) else payload
        p["labels"].extend(labels or [])
        return 200, [{"name": lb, "color": "ededed", "url": f"{self.url}/labels/{lb}"} for lb in p["labels"]]

    def permission(self, login: str, **_: Any) -> tuple[int, Any]:
        perm = self.state.permissions.get(login, "none")
        return 200, {"permission": perm, "role_name": perm, "user": {"login": login, "id": 7, "type": "User"}}


class GitHubServer:
    """Start with :meth:`start`; ``url`` is the base URL to give PyGithub."""

    def __init__(self, state: State | None = None) -> None:
        self.state = state or State()
        self.api = Api(self.state)
        self._srv: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> GitHubServer:
        self._srv = _Server(self.api)
        host, port = self._srv.server_address[:2]
        self.url = f"http://{host}:{port}"
        self.api.base = self.url
        self._thread = threading.Thread(target=self._srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._srv is not None:
            self._srv.shutdown()
            self._srv.server_close()
            self._srv = None

    def fail(self, method: str, pattern: str, status: int = 502, count: int = 1, *, rate_limit: bool = False,
             after: bool = False) -> None:
        """The next ``count`` requests matching make the server answer ``status`` (or a rate limit).

        ``after``: the request is carried out first and only the answer is the error, as when GitHub
        made a write but the response was lost (a retry must find it, not make it twice).
        """
        with self._srv.lock if self._srv else threading.Lock():
            self.state.faults.append(Fault(method, re.compile(pattern), 403 if rate_limit else status, count, rate_limit,
                                           after))

    def requests(self, method: str | None = None, pattern: str = "") -> list[tuple[str, str]]:
        rx = re.compile(pattern)
        return [(m, p) for m, p in self.state.log if (method is None or m == method) and rx.search(p)]

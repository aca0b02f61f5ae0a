"""Why an arm compiled cold beside a compile of the same model already in the cache: the cache keys
each process looked its graphs up under, and where two keys of one problem differ, which of their
components (Inductor's own ``[hash] name: value`` lines) differ.

On the H200 (12-05) arms of one model in identical processes, started after ``warm_cache.py`` had
compiled it, sometimes loaded that compile and sometimes missed it. Reads ``kernelopt bench
--json`` results (each arm's ``cache_keys``, and a replaced arm's cold start's) and
``warm_cache.py --keys`` files, and prints one block per problem.

Usage: python scripts/cache_keys.py noise_*.json warm_keys_*.json
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from warm_cache import spec_of  # this folder: the problems' spelling

Lookup = dict[str, Any]


def lookups_by_problem(paths: list[Path]) -> dict[str, list[tuple[str, Lookup]]]:
    """Every recorded lookup, by problem, each with who made it (``warm``, an arm's label, or an
    arm's label + ``(cold)`` for the start its replacement took over from)."""
    found: dict[str, list[tuple[str, Lookup]]] = defaultdict(list)
    for path in paths:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            print(f"{path}: unreadable ({exc})", file=sys.stderr)
            continue
        if isinstance(data, dict) and "arm_starts" in data:  # a kernelopt bench --json result
            spec = spec_of(str(data.get("target", path.stem)), str(data.get("dtype", "?")))
            for label, start in (data.get("arm_starts") or {}).items():
                warm = start.get("warm_load") if isinstance(start.get("warm_load"), dict) else {}
                for who, keys in ((f"{label} (cold)", warm.get("cold_cache_keys")), (label, start.get("cache_keys"))):
                    found[spec].extend((who, lookup) for lookup in keys or [])
        elif isinstance(data, dict):  # warm_cache.py --keys: {spec: [lookup, ...]}
            for spec, keys in data.items():
                found[spec].extend(("warm", lookup) for lookup in keys or [])
    return found


def differing_components(a: Lookup, b: Lookup) -> list[str]:
    """The component lines of two keys' lookups that are not in both, by component name."""
    def by_name(lookup: Lookup) -> dict[str, str]:
        out = {}
        for line in lookup.get("components") or []:
            name = line.split("] ", 1)[-1].split(":", 1)[0]
            out[name] = line
        return out

    left, right = by_name(a), by_name(b)
    lines = []
    for name in sorted(set(left) | set(right)):
        if left.get(name) != right.get(name):
            lines.append(f"    - {left.get(name, '(absent)')}")
            lines.append(f"    + {right.get(name, '(absent)')}")
    return lines


def report(found: dict[str, list[tuple[str, Lookup]]]) -> list[str]:
    """One block per problem and graph: a process's i-th lookup is its i-th graph (a graph break,
    or a training step's forward and backward, makes several), compared only with the other
    processes' i-th lookups."""
    out = []
    for spec in sorted(found):
        by_graph: dict[int, list[tuple[str, Lookup]]] = defaultdict(list)
        seen: dict[str, int] = defaultdict(int)
        for who, lookup in found[spec]:
            by_graph[seen[who]].append((who, lookup))
            seen[who] += 1
        for graph, lookups in sorted(by_graph.items()):
            title = spec if len(by_graph) == 1 else f"{spec} graph {graph}"
            out.extend(_graph_block(title, lookups))
    return out


def _graph_block(title: str, lookups: list[tuple[str, Lookup]]) -> list[str]:
    by_key: dict[str, list[tuple[str, Lookup]]] = defaultdict(list)
    for who, lookup in lookups:
        by_key[str(lookup.get("key"))].append((who, lookup))
    out = [f"{title}: {len(by_key)} key(s)"]
    for key, uses in by_key.items():
        out.append(f"  {key[:16]}: " + ", ".join(f"{who} {lookup.get('state')}" for who, lookup in uses))
    # A key's components are recorded where a process missed it (it compiled and stored it).
    described = {key: next((lookup for _, lookup in uses if lookup.get("components")), None)
                 for key, uses in by_key.items()}
    keys = [key for key, lookup in described.items() if lookup is not None]
    for key in by_key:
        if described[key] is None:
            out.append(f"  {key[:16]}: no components recorded (no process here compiled it)")
    for other in keys[1:]:
        out.append(f"  {keys[0][:16]} against {other[:16]}:")
        out.extend(differing_components(described[keys[0]], described[other])  # type: ignore[arg-type]
                   or ["    (the recorded components are alike: the difference is past what was kept)"])
    return out


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    lines = report(lookups_by_problem([Path(a) for a in argv]))
    print("\n".join(lines) if lines else "no cache lookups recorded")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

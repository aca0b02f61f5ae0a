"""Print one CPU core this process may use that is local to GPU 0's NUMA node (the first allowed
core otherwise): scripts/gpu_check.sh's noise part pins a bench to it, to see whether where the
arms' host work runs is what makes a launch-bound model's timing noisy."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def parse_cpulist(text: str) -> list[int]:
    """``0-3,8,10-11`` -> [0, 1, 2, 3, 8, 10, 11]."""
    cores: list[int] = []
    for part in text.strip().split(","):
        if "-" in part:
            low, high = part.split("-")
            cores += range(int(low), int(high) + 1)
        elif part:
            cores.append(int(part))
    return cores


def gpu_local_cores() -> list[int]:
    bus = subprocess.run(["nvidia-smi", "--query-gpu=pci.bus_id", "--format=csv,noheader", "-i", "0"],
                         capture_output=True, text=True, check=True).stdout.strip().lower()
    domain, rest = bus.split(":", 1)
    path = Path(f"/sys/bus/pci/devices/{domain[-4:]}:{rest}/local_cpulist")
    return parse_cpulist(path.read_text()) if path.is_file() else []


def main() -> None:
    allowed = sorted(os.sched_getaffinity(0))
    try:
        local = [c for c in gpu_local_cores() if c in allowed]
    except (OSError, subprocess.CalledProcessError, ValueError):
        local = []
    print((local or allowed)[-1])  # the last: core 0 takes most of the machine's interrupts


if __name__ == "__main__":
    main()

"""Benchmark: `brew-infra synth --all` against the floor of importing what it must import.

Both are timed in fresh processes, alternating, so the machine's state affects both the
same way. The floor is a process that only imports pulumi and the pulumi_gcp modules the
program uses (found by reading infra/), loading each (they are lazy modules). Prints the medians, their ratio and the peak
memory (max RSS) of synth. Targets: ratio <= 1.5, peak memory < 400 MB.

    uv run python bench/synth.py [--runs 7]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RATIO_TARGET = 1.5
MEMORY_TARGET_MB = 400


def gcp_modules() -> list[str]:
    found: set[str] = set()
    for path in (ROOT / "infra").rglob("*.py"):
        for match in re.finditer(r"^from pulumi_gcp import ([\w, ]+)$", path.read_text(), re.M):
            found.update(name.strip() for name in match.group(1).split(","))
    return sorted(found)


def run(argv: list[str]) -> tuple[float, float]:
    """Wall seconds and max RSS in MB of one fresh process."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{' '.join(argv)} failed: {proc.stderr.read().decode()[-2000:]}")
    return seconds, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    python = sys.executable
    modules = gcp_modules()
    # pulumi_gcp's modules load lazily, on first attribute access: touching each one is
    # what any program that declares their resources pays, so it belongs to the floor.
    touch = "; ".join(f"{m}._utilities" for m in modules)
    floor_cmd = [python, "-c", f"import pulumi; from pulumi_gcp import {', '.join(modules)}; {touch}"]
    with tempfile.TemporaryDirectory() as out:
        synth_cmd = [python, "-m", "infra.cli", "synth", "--all", "--out", out]
        run(floor_cmd), run(synth_cmd)  # warm the file cache and the bytecode
        floors, synths, peaks = [], [], []
        for _ in range(args.runs):
            floors.append(run(floor_cmd)[0])
            seconds, peak = run(synth_cmd)
            synths.append(seconds)
            peaks.append(peak)
    floor, synth = statistics.median(floors), statistics.median(synths)
    ratio = synth / floor
    peak = max(peaks)
    print(f"pulumi_gcp modules imported by the program: {', '.join(modules)}")
    print(f"floor  (import pulumi + those modules): median {floor:.3f} s over {args.runs} runs")
    from infra.synth.stacks import available_stacks

    stacks = available_stacks()
    print(f"synth --all ({len(stacks)} stacks: {', '.join(stacks)}): median {synth:.3f} s over {args.runs} runs")
    print(f"ratio {ratio:.2f} (target <= {RATIO_TARGET})  {'OK' if ratio <= RATIO_TARGET else 'OVER TARGET'}")
    print(f"peak memory {peak:.0f} MB (target < {MEMORY_TARGET_MB} MB)  "
          f"{'OK' if peak < MEMORY_TARGET_MB else 'OVER TARGET'}")


if __name__ == "__main__":
    main()

"""`brew-infra sandbox up` runs this in the background: start the sandbox, write where
it answers to `<dir>/sandbox.json`, run until SIGTERM, then tear everything down."""

from __future__ import annotations

import argparse
import os
import signal
import threading
from pathlib import Path

from infra.sandbox.sandbox import Sandbox, topology_from_stacks

STATE_FILE = "sandbox.json"
# One-shot: the next promotion run against this sandbox dies after the worker gate.
CRASH_MARKER = "crash-after-worker"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.sandbox.daemon")
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--inject", action="append", default=[])
    args = parser.parse_args(argv)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    args.dir.mkdir(parents=True, exist_ok=True)
    # Postgres lives in the system temp folder: its unprivileged user must reach it.
    with Sandbox(topology_from_stacks(), args.inject) as sandbox:
        state = args.dir / STATE_FILE
        tmp = state.with_suffix(".tmp")
        sandbox.write_endpoints(tmp)
        tmp.rename(state)  # appears whole: `sandbox up` waits for it
        (args.dir / "pid").write_text(str(os.getpid()))
        if CRASH_MARKER in args.inject:
            (args.dir / CRASH_MARKER).write_text("worker")
        stop.wait()
    for leftover in (args.dir / STATE_FILE, args.dir / "pid", args.dir / CRASH_MARKER):
        leftover.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

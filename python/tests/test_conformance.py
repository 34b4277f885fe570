"""The client conformance suite (conformance/README.md) for the Python client: every scenario
of conformance/scenarios through `target/release/dlock-conformance`, with the Python driver,
for the sync and the asyncio API. The runner starts the servers and checks everything; this
module runs it and prints its summary lines.

The runner binary is built by `cargo build --release -p dlock-conformance` (`make test-python`
builds it); without it this test fails (it does not skip).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from servers import REPO

RUNNER = Path(os.environ.get("DLOCK_CONFORMANCE",
                             str(REPO / "target" / "release" / "dlock-conformance")))
SCENARIOS = REPO / "conformance" / "scenarios"
DRIVER = Path(__file__).resolve().parent / "conformance_driver.py"


@pytest.mark.parametrize("api", ["sync", "asyncio"])
def test_every_scenario(api: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert RUNNER.exists(), (
        f"{RUNNER} is missing: build it with `cargo build --release -p dlock-conformance` "
        "(make test-python does)")
    scenarios = sorted(SCENARIOS.glob("*.json"))
    assert scenarios, f"no scenario in {SCENARIOS}"
    driver = f"{shlex.quote(sys.executable)} {shlex.quote(str(DRIVER))} --api {api}"
    # The client's name in the report and in the scenarios' skip lists: python-sync or
    # python-asyncio (the sync API has no way to cancel a waiting acquire from another thread).
    proc = subprocess.run([str(RUNNER), "--driver", driver, "--client", f"python-{api}",
                           *map(str, scenarios)],
                          cwd=REPO, capture_output=True, text=True, timeout=1200)
    # The runner's summary (scenarios passed, failed, skipped; the longest overlap), the lines
    # after it (one per failure and skip) and, on a failure, its log.
    lines = proc.stdout.splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith("conformance ")), len(lines))
    with capsys.disabled():  # shown in `make test`'s output, passed or not
        print("", *lines[start:], sep="\n")
    assert proc.returncode == 0, (
        f"dlock-conformance failed for python {api}:\n{proc.stdout[-8000:]}\n"
        f"{proc.stderr[-4000:]}")

"""The client conformance suite (conformance/README.md) for the Python client: every scenario
of conformance/scenarios through `target/release/dlock-conformance`, with the Python driver,
for the sync and the asyncio API, both runs at once. The runner starts the servers and checks
everything; this module runs it and prints its summary lines.

The runner binary is built by `cargo build --release -p dlock-conformance` (`make test-python`
builds it); without it this test fails (it does not skip).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from servers import REPO

RUNNER = Path(os.environ.get("DLOCK_CONFORMANCE",
                             str(REPO / "target" / "release" / "dlock-conformance")))
SCENARIOS = REPO / "conformance" / "scenarios"
DRIVER = Path(__file__).resolve().parent / "conformance_driver.py"


APIS = ["sync", "asyncio"]


class Run:
    """One API's run of the runner, started at once; its output goes to files (a full pipe
    would stall a run while the other one is awaited)."""

    def __init__(self, api: str, scenarios: list[Path], out: Path) -> None:
        driver = f"{shlex.quote(sys.executable)} {shlex.quote(str(DRIVER))} --api {api}"
        self.stdout, self.stderr = out / f"{api}.out", out / f"{api}.err"
        with open(self.stdout, "w") as o, open(self.stderr, "w") as e:
            # The client's name in the report and in the scenarios' skip lists: python-sync or
            # python-asyncio.
            self.proc = subprocess.Popen(
                [str(RUNNER), "--driver", driver, "--client", f"python-{api}",
                 *map(str, scenarios)], cwd=REPO, stdout=o, stderr=e, text=True)

    def wait(self) -> tuple[int, str, str]:
        code = self.proc.wait(timeout=1200)
        return code, self.stdout.read_text(), self.stderr.read_text()


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Run]]:
    """Both APIs' runs side by side (each scenario starts its own servers on free ports, and
    mostly waits): the suite takes the time of one run instead of two."""
    assert RUNNER.exists(), (
        f"{RUNNER} is missing: build it with `cargo build --release -p dlock-conformance` "
        "(make test-python does)")
    scenarios = sorted(SCENARIOS.glob("*.json"))
    assert scenarios, f"no scenario in {SCENARIOS}"
    out = tmp_path_factory.mktemp("conformance")
    started = {api: Run(api, scenarios, out) for api in APIS}
    try:
        yield started
    finally:
        for run in started.values():
            if run.proc.poll() is None:
                run.proc.kill()
                run.proc.wait()


@pytest.mark.parametrize("api", APIS)
def test_every_scenario(api: str, runs: dict[str, Run],
                        capsys: pytest.CaptureFixture[str]) -> None:
    code, stdout, stderr = runs[api].wait()
    # The runner's summary (scenarios passed, failed, skipped; the longest overlap), the lines
    # after it (one per failure and skip) and, on a failure, its log.
    lines = stdout.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("conformance ")),
                 len(lines))
    with capsys.disabled():  # shown in `make test`'s output, passed or not
        print("", *lines[start:], sep="\n")
    assert code == 0, (
        f"dlock-conformance failed for python {api}:\n{stdout[-8000:]}\n{stderr[-4000:]}")

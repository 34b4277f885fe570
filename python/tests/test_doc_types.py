"""Every Python example of python/README.md and docs/CLIENTS.md passes ``mypy --strict`` as
written: what the docs tell users to write type-checks against the package's types.

Each block is checked as a module of its own after a prelude that declares, with their types,
the names the text around the examples gives them (``client``, ``work``, ``store``,
``write_invoice``, the examples' ``KEY`` ...), and with redis-py's untyped
``execute_command`` allowed (``--untyped-calls-exclude=redis``: redis-py does not type it).
A block that only makes sense inside a
coroutine or a function (top-level ``await``, ``async with``, ``return``) is checked as the
body of ``async def``, as the asyncio REPL (``python -m asyncio``) runs it.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

from servers import REPO

PRELUDE = '''\
from __future__ import annotations
import asyncio
from typing import Any, Iterable, Optional
import redis
import redis.asyncio
import dlock_client as dl

PORT: int = 6379
KEY: str = "invoice:7"
LEASE_MS: int = 30000
owner: str = "owner"
wait_ms: int = 1000
client: dl.Client = dl.Client.from_url("redis://127.0.0.1:6379/0")
work: Iterable[bytes] = []
conn: redis.asyncio.Redis = redis.asyncio.Redis()
shared: redis.asyncio.Redis = redis.asyncio.Redis()


def shared_client() -> redis.Redis:
    return redis.Redis()


def write_invoice(token: Optional[int]) -> None:
    pass


class Store:
    def write(self, chunk: bytes, fencing_token: Optional[int]) -> None:
        pass


store = Store()

'''


def python_blocks(path: Path, fence: str) -> list[str]:
    return re.findall(rf"```{fence}\n(.*?)```", path.read_text(), re.S)


def blocks() -> list[tuple[str, str]]:
    """(a name, the code) of every Python example of the two documents."""
    readme = python_blocks(REPO / "python" / "README.md", "python")
    clients = python_blocks(REPO / "docs" / "CLIENTS.md", "python")
    return ([(f"readme_{i}", b) for i, b in enumerate(readme)]
            + [(f"clients_{i}", b) for i, b in enumerate(clients)])


def as_module(code: str) -> str:
    try:
        compile(code, "<example>", "exec", dont_inherit=True)
        return PRELUDE + code
    except SyntaxError:  # top-level await / async with / return: a coroutine's body
        return PRELUDE + "\nasync def _example() -> Any:\n" + textwrap.indent(code, "    ")


def test_every_python_example_type_checks(tmp_path: Path) -> None:
    found = blocks()
    assert len(found) >= 6, "the documents' examples were not found"
    files = []
    for name, code in found:
        f = tmp_path / f"{name}.py"
        f.write_text(as_module(code))
        files.append(str(f))
    # redis-py does not type `execute_command`: the raw redis-py examples call it.
    mypy = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental",
                           "--untyped-calls-exclude=redis", "--no-error-summary", *files],
                          capture_output=True, text=True, cwd=tmp_path)
    assert mypy.returncode == 0, "\n" + mypy.stdout + mypy.stderr

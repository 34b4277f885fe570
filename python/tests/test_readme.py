"""The README's examples run as written (against the test server instead of port 6379)."""

from __future__ import annotations

import asyncio
import re
import textwrap
from typing import Any

from servers import REPO, Server


def python_blocks() -> list[str]:
    text = (REPO / "python" / "README.md").read_text()
    return re.findall(r"```python\n(.*?)```", text, re.S)


def block_with(text: str) -> str:
    """The README's example that contains `text`."""
    found = [b for b in python_blocks() if text in b]
    assert len(found) == 1, f"{len(found)} examples contain {text!r}"
    return found[0]


def run(block: str, server: Server, extra: dict[str, Any]) -> dict[str, Any]:
    code = block.replace("redis://127.0.0.1:6379/0", server.url)
    scope: dict[str, Any] = dict(extra)
    exec(compile(code, "README.md", "exec"), scope)
    return scope


def test_sync_example(server: Server) -> None:
    written: list[Any] = []
    block = block_with("with lock(timeout=5.0) as held:")
    scope = run(block, server, {"write_invoice": lambda token: written.append(token)})
    assert len(written) == 2 and written[-1] == scope["held"].token  # with lock, lock(timeout=)
    assert all(isinstance(t, int) for t in written) and written[0] < written[1]
    assert scope["permits"].count == 2


def test_asyncio_example(server: Server) -> None:
    block = block_with("dl.asyncio.Client.from_url")
    body = textwrap.indent(block.replace("import dlock_client as dl\n", ""), "    ")
    scope = run(f"import dlock_client as dl\n\nasync def main():\n{body}\n", server, {})
    asyncio.run(scope["main"]())


def test_lost_example(server: Server) -> None:
    class Store:
        def __init__(self) -> None:
            self.writes: list[Any] = []

        def write(self, chunk: Any, fencing_token: int) -> None:
            self.writes.append((chunk, fencing_token))

    import dlock_client as dl

    client = dl.Client.from_url(server.url)
    store = Store()
    run(block_with("if held.lost.is_set():"), server,
        {"client": client, "work": ["a", "b"], "store": store})
    client.close()
    assert [c for c, _ in store.writes] == ["a", "b"]


def test_cancel_example(server: Server) -> None:
    scope = run(block_with("acquire(cancel=stop)"), server, {})
    assert scope["held"].released  # nothing cancelled it: acquired and released
    scope["client"].close()

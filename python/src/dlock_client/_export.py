"""The Rust client's export shipped as ``scripts.json``: the script backend's Lua texts and
dlock-core's argument limits (written by ``make scripts``; ``client/tests/script_copies.rs``
fails when this copy differs from the Rust export). Imports nothing of the package, so both
the protocol rules and the script backend can read it.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Any


@lru_cache(maxsize=1)
def _doc() -> dict[str, Any]:
    data = resources.files(__package__).joinpath("scripts.json").read_text(encoding="utf-8")
    doc: dict[str, Any] = json.loads(data)
    return doc


def text(name: str) -> str:
    """One entry of the export: a script's full text, the unlock message, the prefix."""
    value = _doc()[name]
    assert isinstance(value, str)
    return value


def limits() -> dict[str, int]:
    """dlock-core's argument limits: ``max_ms``, ``max_lock_delay_ms``, ``max_capacity``."""
    value = _doc()["limits"]
    assert isinstance(value, dict)
    return value

"""The package's version is the project's (the dlock crate's), with a changelog entry."""

import re

import dlock_client as dl
from servers import REPO


def test_version_is_the_projects() -> None:
    cargo = (REPO / "Cargo.toml").read_text()
    package = cargo[cargo.index("[package]"):]  # the module's crate: the project's version
    version = re.search(r'^version\s*=\s*"([^"]+)"', package, re.M)
    assert version is not None
    assert dl.__version__ == version.group(1)
    changelog = (REPO / "python" / "CHANGELOG.md").read_text()
    assert f"## [{dl.__version__}]" in changelog

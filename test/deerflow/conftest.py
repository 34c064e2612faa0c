"""Fixtures for the DeerFlow suite.

The clients are built the way DeerFlow's AioSandbox builds its agent-sandbox client for a
sandbox on a private address: base_url is the sandbox_url, a 600 s timeout, an httpx client that
ignores proxy settings from the environment, and no credential (the capability in the URL is the
only key). test/deerflow/agent-sandbox.test.ts creates the sandboxes through the provisioner's
DeerFlow API, and test/docker/deerflow-local.test.ts starts the sandbox image as DeerFlow's local
container backend does; both pass the URLs in SANDPIT_SANDBOX_URL and SANDPIT_OTHER_SANDBOX_URL.
"""

import os
import uuid

import httpx
import pytest
from agent_sandbox import Sandbox

def _url(name: str) -> str:
    url = os.environ.get(name)
    if not url:
        pytest.fail(f"{name} is not set: this suite runs through test/deerflow/pytest-suite.ts")
    return url


def _client(url: str) -> Sandbox:
    direct = httpx.Client(timeout=600, follow_redirects=True, trust_env=False)
    return Sandbox(base_url=url, timeout=600, httpx_client=direct)


@pytest.fixture(scope="session")
def sandbox_url() -> str:
    return _url("SANDPIT_SANDBOX_URL")


@pytest.fixture(scope="session")
def client(sandbox_url: str) -> Sandbox:
    return _client(sandbox_url)


@pytest.fixture(scope="session")
def other_client() -> Sandbox:
    return _client(_url("SANDPIT_OTHER_SANDBOX_URL"))


@pytest.fixture
def workdir(client: Sandbox) -> str:
    """A fresh directory in the workspace, made by a command as an agent would."""
    path = f"/mnt/user-data/workspace/py-{uuid.uuid4().hex[:12]}"
    made = client.shell.exec_command(command=f"mkdir -p {path}", no_change_timeout=600)
    assert made.data is not None and made.data.exit_code == 0, made
    return path

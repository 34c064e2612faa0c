"""Fixtures for the E2B conformance suite (Python half).

The target comes from the environment, as an unchanged E2B program gets it: E2B_API_KEY,
E2B_API_URL, E2B_SANDBOX_URL, E2B_DOMAIN (read by the SDKs themselves), plus the suite's own
SANDPIT_E2B_TARGET (a name), SANDPIT_E2B_LACKS (JSON: feature -> why the target lacks it) and
SANDPIT_E2B_QUOTA_KEY / SANDPIT_E2B_QUOTA_MAX (a key allowed that many sandboxes at once).
test/e2b-compat/targets.ts builds this environment; test/e2b-compat/fake.test.ts and
test/provisioner/e2b-sdk.test.ts run the suite.
"""

import json
import os
import uuid

import pytest
from e2b import Sandbox


def _env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        pytest.fail(f"{name} is not set: this suite runs through test/e2b-compat/*.test.ts")
    return value


@pytest.fixture(scope="session")
def lacks() -> dict:
    _env("E2B_API_KEY")
    return json.loads(os.environ.get("SANDPIT_E2B_LACKS", "{}"))


@pytest.fixture
def need(lacks):
    """need("pause") skips the test, saying why, when the target lacks the feature."""

    def check(feature: str) -> None:
        if feature in lacks:
            target = os.environ.get("SANDPIT_E2B_TARGET", "the target")
            pytest.skip(f"{target} lacks {feature}: {lacks[feature]}")

    return check


@pytest.fixture
def run_id() -> str:
    return uuid.uuid4().hex[:8]


@pytest.fixture
def quota() -> tuple:
    key = os.environ.get("SANDPIT_E2B_QUOTA_KEY")
    return (key, int(os.environ.get("SANDPIT_E2B_QUOTA_MAX", "0"))) if key else (None, 0)


@pytest.fixture
def made():
    """Sandboxes a test makes; all killed when it ends, whatever happened."""
    sandboxes = []
    yield sandboxes
    for sbx in sandboxes:
        try:
            sbx.kill()
        except Exception:
            pass


@pytest.fixture
def sbx(made) -> Sandbox:
    s = Sandbox.create(timeout=600, envs={"FROM_CREATE": "sandbox-wide", "OVERRIDDEN": "create"})
    made.append(s)
    return s

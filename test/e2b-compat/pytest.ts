/** The Python half of the E2B conformance suite, as test/deerflow/pytest-suite.ts runs it. */
import type { PytestSuite } from "../deerflow/pytest-suite.ts";

const HERE = new URL(".", import.meta.url).pathname;

export const PYTEST_SUITE: PytestSuite = {
  dir: HERE,
  requirements: `${HERE}requirements.txt`,
  label: "e2b-compat",
  // The 100 MiB round trip, and pip installing pandas and matplotlib into a sandbox.
  timeoutMs: 600_000,
};

/**
 * The Python E2B conformance suite (test/e2b-compat: the official Python SDKs in pytest) against
 * `sandpit serve --backend docker`, on its E2B API out of the box, as test/serve/e2b-local.test.ts
 * runs the JS suite on local; the engine and image are the docker project's global setup's.
 */
import { loadPytest } from "../deerflow/pytest-suite.ts";
import { PYTEST_SUITE } from "../e2b-compat/pytest.ts";
import { SERVE_TARGETS, targetEnv } from "../e2b-compat/targets.ts";
import { dockerServeArgs, dockerServeEnv } from "./docker-backend.ts";
import { serveForE2b } from "./harness.ts";

const TARGET = SERVE_TARGETS.docker;
const connection = serveForE2b("docker", dockerServeArgs(), dockerServeEnv());

(await loadPytest(PYTEST_SUITE))(`E2B conformance (Python SDK) against ${TARGET.name}`, () =>
  targetEnv(TARGET, connection()),
);

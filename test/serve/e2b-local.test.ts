/**
 * The JS E2B conformance suite (test/e2b-compat: the official JS SDKs in vitest) against
 * `sandpit serve --backend local`, on its E2B API out of the box: no token secret given (serve
 * keeps its own in the state directory), `E2B_API_URL` and `E2B_SANDBOX_URL` both the
 * SANDPIT_E2B_URL it prints, sandboxd reached over its unix socket. The Python suite runs against
 * serve on Docker (test/serve/docker-e2b.test.ts): the E2B API is one code path over either
 * backend, and both suites on both backends would add a quarter of an hour to every test run.
 */
import { e2bConformance } from "../e2b-compat/conformance.ts";
import { SERVE_TARGETS } from "../e2b-compat/targets.ts";
import { serveForE2b } from "./harness.ts";

e2bConformance(SERVE_TARGETS.local, serveForE2b("local", ["--backend", "local"]));

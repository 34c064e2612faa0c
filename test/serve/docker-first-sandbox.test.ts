/**
 * serve's first sandbox on the Docker backend (test/serve/first-sandbox-suite.ts), on the engine
 * and image of the docker project's global setup.
 */
import { dockerLeftovers, dockerServeArgs, dockerServeEnv } from "./docker-backend.ts";
import { firstSandboxSuite } from "./first-sandbox-suite.ts";

firstSandboxSuite("docker", dockerServeArgs, dockerLeftovers, dockerServeEnv);

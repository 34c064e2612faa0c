/** serve's first sandbox on the local backend (test/serve/first-sandbox-suite.ts). */
import { readdir } from "node:fs/promises";
import { join } from "node:path";
import { firstSandboxSuite } from "./first-sandbox-suite.ts";

firstSandboxSuite(
  "local",
  () => ["--backend", "local"],
  async (stateDir, stateId) =>
    readdir(join(stateDir, "sandboxes", "users", stateId, "threads")).catch(() => []),
);

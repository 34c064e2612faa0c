/**
 * `sandpit serve --backend local` as a child process: the provisioner's API suites
 * (test/serve/api-suite.ts) against it. Local sandboxes live in serve's state directory.
 */
import { readdir } from "node:fs/promises";
import { join } from "node:path";
import { bwrapAvailable } from "../../sdk/src/providers/local/bwrap.ts";
import { serveApiSuite } from "./api-suite.ts";

serveApiSuite("local", {
  args: ["--backend", "local"],
  // Host processes have no limits; a private network namespace needs bubblewrap.
  supports: { resources: false, networkDeny: await bwrapAvailable() },
  // The local provider keeps each sandbox in users/<user>/threads/<thread>; serve's user is
  // its state's id.
  leftovers: async (stateDir, stateId) =>
    readdir(join(stateDir, "sandboxes", "users", stateId, "threads")).catch(() => []),
});

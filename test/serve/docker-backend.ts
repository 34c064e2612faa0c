/**
 * `sandpit serve --backend docker` as the docker project's files run it: the engine and image of
 * the project's global setup, and what of a serve state's sandboxes the engine still holds.
 */
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { inject } from "vitest";

const run = promisify(execFile);

/** serve's flags. No warm pool: its blank containers belong to no serve state, so nothing would remove them. */
export const dockerServeArgs = () => [
  "--backend",
  "docker",
  "--image",
  inject("sandboxImage"),
  "--warm",
  "0",
];

export const dockerServeEnv = () => ({ DOCKER_HOST: `unix://${inject("dockerSocket")}` });

/** Names of the containers serve state `stateId` still has (running or not). */
export async function dockerLeftovers(_stateDir: string, stateId: string): Promise<string[]> {
  const { stdout } = await run("docker", [
    "ps",
    "-a",
    "--format",
    "{{.Names}}",
    "--filter",
    `label=serve.sandpit.dev/state=${stateId}`,
  ]);
  return stdout.split("\n").filter(Boolean);
}

/**
 * The packed SDK on the Docker provider, from a project outside the repository that installed
 * it with dockerode (its optional peer for Docker), on Node 22 and Node 24: the Docker half of
 * test/consumer/sdk.test.ts, which needs this project's engine and sandbox image.
 */
import { execFile } from "node:child_process";
import { rm } from "node:fs/promises";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { ensureNode, NODE_VERSIONS } from "../consumer/node-versions.ts";
import { makeConsumer, packTarballs, type Consumer } from "../consumer/project.ts";

const run = promisify(execFile);
const PREFIX = "sandpit-consumer";
const made: string[] = [];
let tarballs: string[];

async function removeContainers(): Promise<void> {
  const { stdout } = await run("docker", ["ps", "-aq", "--filter", `name=^${PREFIX}-`]);
  const ids = stdout.split("\n").filter(Boolean);
  if (ids.length) await run("docker", ["rm", "-f", "-v", ...ids]);
}

beforeAll(async () => {
  await removeContainers();
  tarballs = await packTarballs(["sdk"]);
  made.push(join(tarballs[0]!, ".."));
}, 300_000);

afterAll(async () => {
  await removeContainers();
  for (const dir of made) await rm(dir, { recursive: true, force: true });
});

describe.each(NODE_VERSIONS)("a consumer project with dockerode on Node %s", (version) => {
  let consumer: Consumer;

  beforeAll(async () => {
    consumer = await makeConsumer(await ensureNode(version), [...tarballs, "dockerode@4.0.8"]);
    made.push(consumer.dir);
  }, 600_000);

  it("runs Python and TypeScript in a container, with nothing on stdout but its own", async () => {
    const options = {
      image: inject("sandboxImage"),
      socketPath: inject("dockerSocket"),
      containerPrefix: PREFIX,
      basePort: 33600,
      idleTimeoutMs: 0,
      memoryMb: 512,
    };
    const { stdout } = await consumer.exec("docker.mjs", [JSON.stringify(options)]);
    const lines = stdout.split("\n").filter(Boolean);
    expect(lines).toHaveLength(1);
    const out = JSON.parse(lines[0]!) as Record<string, unknown>;
    expect(out.python).toMatchObject({ success: true, stdout: "42\n" });
    expect(out.typescript).toMatchObject({ success: true, stdout: "42\n" });
  }, 180_000);
});

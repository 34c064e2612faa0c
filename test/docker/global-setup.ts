/**
 * vitest globalSetup for suites that need a real Docker engine and the sandbox image: starts
 * dockerd when none answers (stopped again at teardown, only if we started it), builds the image
 * when its inputs changed, and hands both to the tests:
 *
 *   import { inject } from "vitest";
 *   const image = inject("sandboxImage");        // "sandpit-sandbox:<12 hex>"
 *   const socket = inject("dockerSocket");       // "/var/run/docker.sock"
 *
 * The image trusts this machine's CA store, so pip and npm inside sandboxes work behind a
 * TLS-inspecting proxy.
 */
import Docker from "dockerode";
import type { TestProject } from "vitest/node";
import { ensureTestImage } from "./test-image.ts";
import { ensureDocker } from "./dockerd.ts";

declare module "vitest" {
  export interface ProvidedContext {
    sandboxImage: string;
    dockerSocket: string;
  }
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const log = (line: string) => process.stderr.write(`[docker setup] ${line}\n`);
  const engine = await ensureDocker({ log });
  try {
    const image = await ensureTestImage({
      docker: new Docker({ socketPath: engine.socketPath }),
      log,
    });
    log(`${image.built ? "built" : "using"} ${image.tag} (${image.seconds.toFixed(1)} s)`);
    project.provide("sandboxImage", image.tag);
    project.provide("dockerSocket", engine.socketPath);
  } catch (err) {
    await engine.stop();
    throw err;
  }
  return () => engine.stop();
}

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
import { existsSync } from "node:fs";
import Docker from "dockerode";
import type { TestProject } from "vitest/node";
import { ensureSandboxImage } from "../../runtime/image/build.ts";
import { ensureDocker } from "./dockerd.ts";

declare module "vitest" {
  export interface ProvidedContext {
    sandboxImage: string;
    dockerSocket: string;
  }
}

const MACHINE_TRUST_STORE = "/etc/ssl/certs/ca-certificates.crt";

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const log = (line: string) => process.stderr.write(`[docker setup] ${line}\n`);
  const engine = await ensureDocker({ log });
  try {
    const image = await ensureSandboxImage({
      docker: new Docker({ socketPath: engine.socketPath }),
      ...(existsSync(MACHINE_TRUST_STORE) ? { caBundle: MACHINE_TRUST_STORE } : {}),
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

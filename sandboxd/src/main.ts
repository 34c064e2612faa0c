#!/usr/bin/env node
/**
 * sandboxd entry point. Prints one JSON line `{"ready":true,"address":...,"port":...}` on stdout once it
 * listens, logs JSON to stderr, and stops cleanly on SIGTERM/SIGINT.
 */
import { readFile } from "node:fs/promises";
import { createLogger } from "./log.ts";
import { startSandboxd } from "./start.ts";
import { DRAINED_EXIT_CODE } from "./wire.ts";
import { readSettings } from "./config.ts";

async function readToken(
  settings: ReturnType<typeof readSettings>,
): Promise<string | { sha256: string } | null> {
  if (settings.SANDBOXD_TOKEN_SHA256) return { sha256: settings.SANDBOXD_TOKEN_SHA256 };
  if (settings.SANDBOXD_TOKEN) return settings.SANDBOXD_TOKEN;
  if (settings.SANDBOXD_TOKEN_FILE)
    return (await readFile(settings.SANDBOXD_TOKEN_FILE, "utf8")).trim();
  if (settings.SANDBOXD_TOKEN_STDIN !== "0") {
    const lines = process
      .getBuiltinModule("node:readline")
      .createInterface({ input: process.stdin });
    for await (const line of lines) return line.trim();
  }
  // DeerFlow's local container backend sends no credential: serving its routes open is a choice
  // the deployer makes explicitly, never a default.
  if (settings.SANDBOXD_AIO_NO_AUTH === "1") return null;
  throw new Error(
    "no token: set SANDBOXD_TOKEN_SHA256 (its digest), SANDBOXD_TOKEN, SANDBOXD_TOKEN_FILE or SANDBOXD_TOKEN_STDIN=1; or, to serve " +
      "only the AIO routes (/v1/sandbox, /v1/shell, /v1/bash, /v1/file) without a token, as " +
      "DeerFlow's local container backend needs, set SANDBOXD_AIO_NO_AUTH=1",
  );
}

/** How long a drained sandboxd's shutdown may take before it exits regardless. */
const DRAIN_EXIT_DEADLINE_MS = 5_000;

let settings: ReturnType<typeof readSettings>;
let token: string | { sha256: string } | null;
try {
  settings = readSettings(process.env);
  token = await readToken(settings);
} catch (err) {
  // A configuration mistake is the operator's to fix: say what it is, without a stack trace.
  process.stderr.write(`sandboxd: ${(err as Error).message}\n`);
  process.exit(2);
}
// Synchronous on Linux (files, pipes and terminals alike): a record is out before an exit.
const logger = createLogger(settings.SANDBOXD_LOG_LEVEL);
try {
  // The token and settings are not passed on: children get a scrubbed environment built afresh.
  delete process.env.SANDBOXD_TOKEN;
  delete process.env.SANDBOXD_TOKEN_SHA256;
  const server = await startSandboxd({ settings, token, logger, env: process.env });
  process.stdout.write(
    JSON.stringify({ ready: true, address: server.address, port: server.port }) + "\n",
  );
  const stop = (why: string, code = 0) => {
    logger.info({ why }, "stopping");
    void server.close().then(() => process.exit(code));
  };
  // Drained: nothing runs and nothing will (every request is refused), so sandboxd exits, which
  // stops its container. Its exit status tells the provider that a request cut off by it never
  // ran. Bounded: a shutdown that hangs must not leave a sandbox refusing everything.
  void server.drained.then(() => {
    setTimeout(() => process.exit(DRAINED_EXIT_CODE), DRAIN_EXIT_DEADLINE_MS).unref();
    stop("drained (idle)", DRAINED_EXIT_CODE);
  });
  process.on("SIGTERM", () => stop("SIGTERM"));
  process.on("SIGINT", () => stop("SIGINT"));
  if (settings.SANDBOXD_TOKEN_STDIN === "1") {
    // The parent holds our stdin: when it goes away, so do we.
    process.stdin.on("end", () => stop("parent closed stdin"));
    process.stdin.resume();
  }
} catch (err) {
  logger.fatal({ err }, "sandboxd failed to start");
  process.exit(1);
}

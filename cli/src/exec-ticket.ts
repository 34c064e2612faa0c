/**
 * Exec tickets: how `sandpit exec` reaches a sandbox it reached before without loading the SDK's
 * providers, the config parser or the command tree (./fast-exec.ts). After an `exec` reached a
 * sandboxd-backed sandbox through its provider, the CLI keeps what the SDK resolved: sandboxd's
 * address and token (`sandboxdConnection`), the sandbox's defaults (`sandboxdDefaults`) and the
 * end of its lifetime, under the config identity it was resolved with (./config.ts), in
 * `$XDG_CACHE_HOME/sandpit/exec/`.
 *
 * The token opens the sandbox's sandboxd as the provider's own state does, so the directory is
 * 0700 and each file 0600. A ticket is only a shortcut: one whose sandboxd no longer answers, or
 * refuses its token (paused, removed, restarted), sends that invocation down the provider path,
 * which writes it again; a ticket past the sandbox's lifetime is not used. Every other command
 * on the sandbox through the CLI (pause, rm, timeout, ...) drops its ticket first.
 */
import { createHash } from "node:crypto";
import { mkdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import type { SandboxdConnection, SandboxDefaults, SandboxInstance } from "@sandpit/sdk";
import { cacheDir } from "./cache-dir.ts";
import { configIdentity } from "./config.ts";

export interface ExecTicket {
  sandboxId: string;
  connection: SandboxdConnection;
  defaults: SandboxDefaults;
  /** The sandbox's end of life when the ticket was written (ISO), if it had one. */
  expiresAt?: string | undefined;
}

function ticketFile(sandboxId: string, config: string | undefined): string {
  const key = createHash("sha256")
    .update(`${configIdentity(config)}\0${sandboxId}`)
    .digest("hex")
    .slice(0, 32);
  return join(cacheDir("exec"), `${key}.json`);
}

/** The sandbox's ticket under this config, or null (none, unreadable, past its lifetime). */
export async function readTicket(
  sandboxId: string,
  config: string | undefined,
): Promise<ExecTicket | null> {
  try {
    const t = JSON.parse(await readFile(ticketFile(sandboxId, config), "utf8")) as ExecTicket;
    if (t.sandboxId !== sandboxId || typeof t.connection?.token !== "string") return null;
    if (t.expiresAt && Date.parse(t.expiresAt) <= Date.now()) return null;
    return t;
  } catch {
    return null;
  }
}

/**
 * Keeps the ticket of a sandbox just reached through its provider. Not for sandboxes that
 * sandboxd does not serve (E2B, Daytona): those have no connection to keep.
 */
export async function writeTicket(
  sandbox: SandboxInstance,
  config: string | undefined,
): Promise<void> {
  const { sandboxdConnection, sandboxdDefaults, isSandboxError } = await import("@sandpit/sdk");
  let ticket: ExecTicket;
  try {
    const info = await sandbox.getInfo();
    ticket = {
      sandboxId: sandbox.sandboxId,
      connection: await sandboxdConnection(sandbox),
      defaults: sandboxdDefaults(sandbox),
      expiresAt: info.expiresAt?.toISOString(),
    };
  } catch (err) {
    if (isSandboxError(err, "NOT_SUPPORTED")) return;
    throw err;
  }
  const file = ticketFile(sandbox.sandboxId, config);
  await mkdir(cacheDir("exec"), { recursive: true, mode: 0o700 });
  const tmp = `${file}.${process.pid}`;
  await rm(tmp, { force: true });
  await writeFile(tmp, JSON.stringify(ticket), { mode: 0o600, flag: "wx" });
  await rename(tmp, file);
}

export async function dropTicket(sandboxId: string, config: string | undefined): Promise<void> {
  await rm(ticketFile(sandboxId, config), { force: true });
}

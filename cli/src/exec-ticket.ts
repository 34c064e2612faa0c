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
import { join } from "node:path";
import type { SandboxdConnection, SandboxDefaults, SandboxInstance } from "@sandpit/sdk";
import { cacheDir } from "./cache-dir.ts";
import { configIdentity } from "./config.ts";

// node:fs as its CommonJS object, and no node:crypto: an ESM import of node:fs reads its
// `promises` getter, which loads fs/promises, readline and a dozen stream modules, and
// node:crypto costs as much again; together ~8 ms of the ~60 ms a plain `sandpit exec` takes.
const { mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } =
  process.getBuiltinModule("node:fs");

export interface ExecTicket {
  sandboxId: string;
  /** The config identity (./config.ts) it was resolved under; a ticket of another is not used. */
  identity: string;
  connection: SandboxdConnection;
  defaults: SandboxDefaults;
  /** The sandbox's end of life when the ticket was written (ISO), if it had one. */
  expiresAt?: string | undefined;
}

/**
 * The ticket's file name: a 64-bit FNV-1a of (config identity, sandbox id). Only a file name:
 * the ticket holds both and is used only when they match, so two keys sharing a name cost a
 * ticket, never a wrong sandbox.
 */
function ticketFile(sandboxId: string, identity: string): string {
  let h = 0xcbf29ce484222325n;
  for (const byte of Buffer.from(`${identity}\0${sandboxId}`)) {
    h = ((h ^ BigInt(byte)) * 0x100000001b3n) & 0xffffffffffffffffn;
  }
  return join(cacheDir("exec"), `${h.toString(16).padStart(16, "0")}.json`);
}

/** The sandbox's ticket under this config, or null (none, unreadable, past its lifetime). */
export function readTicket(sandboxId: string, config: string | undefined): ExecTicket | null {
  try {
    const identity = configIdentity(config);
    const t = JSON.parse(readFileSync(ticketFile(sandboxId, identity), "utf8")) as ExecTicket;
    if (t.sandboxId !== sandboxId || t.identity !== identity) return null;
    if (typeof t.connection?.token !== "string") return null;
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
  const identity = configIdentity(config);
  let ticket: ExecTicket;
  try {
    const info = await sandbox.getInfo();
    ticket = {
      sandboxId: sandbox.sandboxId,
      identity,
      connection: await sandboxdConnection(sandbox),
      defaults: sandboxdDefaults(sandbox),
      expiresAt: info.expiresAt?.toISOString(),
    };
  } catch (err) {
    if (isSandboxError(err, "NOT_SUPPORTED")) return;
    throw err;
  }
  const file = ticketFile(sandbox.sandboxId, identity);
  mkdirSync(cacheDir("exec"), { recursive: true, mode: 0o700 });
  const tmp = `${file}.${process.pid}`;
  rmSync(tmp, { force: true });
  writeFileSync(tmp, JSON.stringify(ticket), { mode: 0o600, flag: "wx" });
  renameSync(tmp, file);
}

/** Drops the sandbox's ticket, if any; a ticket that cannot be removed is reported nowhere. */
export function forgetTicket(sandboxId: string, config: string | undefined): void {
  try {
    rmSync(ticketFile(sandboxId, configIdentity(config)), { force: true });
  } catch {
    // Only a shortcut: a stale one is refused by its sandboxd and dropped on use.
  }
}

/**
 * A local sandbox's record: `sandbox.json` next to (not inside) its data directory, so code in
 * the sandbox cannot edit it. It holds what create was given and the sandbox's lifetime, which
 * any process reading the state directory (list, get, a reaper after a restart) sees the same.
 *
 * Records, run files and locks are read and written with synchronous calls: each is a few hundred
 * bytes on a local disk, a few microseconds of system call, where an awaited call costs a trip
 * through libuv's thread pool (0.1–0.5 ms measured here), and a warm create makes a dozen of them.
 */
import * as fs from "node:fs/promises";
import { readFileSync, renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { SandboxError } from "../../errors.ts";
import type { SandboxInfo, SandboxLanguage, SandboxMount, SandboxState } from "../../types.ts";

export interface SandboxRecord {
  sandboxId: string;
  language: SandboxLanguage;
  envs: Record<string, string>;
  workingDirectory?: string | undefined;
  timeoutMs?: number | undefined;
  createdAt: string;
  labels?: Record<string, string> | undefined;
  /** When the sandbox is deleted (ISO time), if it has a lifetime. */
  expiresAt?: string | undefined;
  /** Idle this long, it is stopped (its files stay). */
  idleTimeoutMs?: number | undefined;
  /** "deny": a private network namespace; "internet": the host's (bubblewrap only). */
  network?: "deny" | "internet" | undefined;
  mounts?: SandboxMount[] | undefined;
}

export async function readRecord(dir: string): Promise<SandboxRecord | null> {
  try {
    return JSON.parse(readFileSync(join(dir, "sandbox.json"), "utf8")) as SandboxRecord;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return null;
    throw new SandboxError(`the record of sandbox in ${dir} is unreadable`, "INTERNAL", err);
  }
}

/** Written to a temporary file and renamed, so a reader never sees half a record. */
export async function writeRecord(dir: string, record: SandboxRecord): Promise<void> {
  const tmp = join(dir, `.sandbox.json.${process.pid}`);
  writeFileSync(tmp, JSON.stringify(record, null, 2));
  renameSync(tmp, join(dir, "sandbox.json"));
}

/** Every sandbox directory under `baseDir` (users/<user>/threads/<thread>). */
export async function sandboxDirs(baseDir: string): Promise<string[]> {
  const names = async (dir: string) =>
    (await fs.readdir(dir, { withFileTypes: true }).catch(() => []))
      .filter((e) => e.isDirectory())
      .map((e) => e.name);
  const users = join(baseDir, "users");
  const out: string[] = [];
  for (const user of await names(users)) {
    const threads = join(users, user, "threads");
    for (const thread of await names(threads)) out.push(join(threads, thread));
  }
  return out;
}

export function expired(record: SandboxRecord, now = Date.now()): boolean {
  return record.expiresAt !== undefined && Date.parse(record.expiresAt) <= now;
}

export function recordInfo(record: SandboxRecord, state: SandboxState): SandboxInfo {
  const [userId, threadId] = record.sandboxId.split(".");
  return {
    sandboxId: record.sandboxId,
    provider: "local",
    state,
    language: record.language,
    labels: record.labels ?? {},
    ...(threadId ? { threadId } : {}),
    ...(userId ? { userId } : {}),
    createdAt: new Date(record.createdAt),
    ...(record.expiresAt ? { expiresAt: new Date(record.expiresAt) } : {}),
  };
}

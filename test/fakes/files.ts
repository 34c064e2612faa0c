/** File helpers the fakes share: stat entries and writes into a sandbox's real directory. */
import type { Stats } from "node:fs";
import * as fs from "node:fs/promises";
import { basename, dirname, join } from "node:path";
import type { FakeSandbox } from "./sandbox-host.ts";

export interface Entry {
  name: string;
  path: string;
  type: "file" | "dir" | "symlink" | "other";
  size: number;
  mode: number;
  mtime: Date;
  stats: Stats;
}

export function entryOf(sbx: FakeSandbox, host: string, st: Stats): Entry {
  const type = st.isSymbolicLink()
    ? "symlink"
    : st.isDirectory()
      ? "dir"
      : st.isFile()
        ? "file"
        : "other";
  return {
    name: basename(host),
    path: sbx.virtualPath(host),
    type,
    size: st.size,
    mode: st.mode & 0o7777,
    mtime: st.mtime,
    stats: st,
  };
}

export async function statEntry(sbx: FakeSandbox, host: string): Promise<Entry | null> {
  const st = await fs.lstat(host).catch(() => null);
  return st ? entryOf(sbx, host, st) : null;
}

export async function listEntries(sbx: FakeSandbox, host: string): Promise<Entry[]> {
  const names = await fs.readdir(host);
  const out: Entry[] = [];
  for (const name of names.sort()) {
    const e = await statEntry(sbx, join(host, name));
    if (e) out.push(e);
  }
  return out;
}

/** Writes through a temporary file and a rename, creating parent directories. */
export async function writeFileAtomic(host: string, data: Buffer): Promise<void> {
  await fs.mkdir(dirname(host), { recursive: true });
  const tmp = `${host}.fake-upload-${process.pid}-${Date.now()}`;
  await fs.writeFile(tmp, data);
  await fs.rename(tmp, host);
}

export function permissions(e: Entry): string {
  const t = e.type === "dir" ? "d" : e.type === "symlink" ? "l" : "-";
  const bits = "rwxrwxrwx";
  let s = "";
  for (let i = 0; i < 9; i++) s += e.mode & (1 << (8 - i)) ? bits[i] : "-";
  return t + s;
}

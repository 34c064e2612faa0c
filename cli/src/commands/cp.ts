/**
 * `sandpit cp`: files and directories between this machine and a sandbox, either way, streamed
 * (memory stays flat for any size). As `docker cp`: when the destination is an existing
 * directory the source is copied into it under its own name, otherwise it becomes the
 * destination. `ID:path` names the sandbox side; relative sandbox paths start at its workspace.
 */
import { createReadStream, createWriteStream } from "node:fs";
import * as fs from "node:fs/promises";
import { basename, join, relative } from "node:path";
import { posix } from "node:path";
import { pipeline } from "node:stream/promises";
import { Readable } from "node:stream";
import type { Command } from "commander";
import type { SandboxFilesystem } from "@sandpit/sdk";
import { action } from "../command-kit.ts";
import { usageError } from "../exit.ts";
import { note, printJson } from "../output.ts";
import { progress, type Progress } from "../progress.ts";
import { withSandbox } from "../provider.ts";

/** Files in flight at once: enough to hide per-file round trips, few enough to stay gentle. */
const PARALLEL = 4;

interface Remote {
  id: string;
  path: string;
}

/** `ID:path` is the sandbox side; a colon after a slash (`./a:b`) is part of a local path. */
export function parseSpec(spec: string): Remote | undefined {
  const m = /^([^/:]+):(.*)$/.exec(spec);
  return m ? { id: m[1]!, path: m[2] || "." } : undefined;
}

interface Plan {
  dirs: string[];
  files: Array<{ from: string; to: string; size: number }>;
  skipped: string[];
}

interface Summary {
  from: string;
  to: string;
  files: number;
  directories: number;
  bytes: number;
}

export function register(program: Command): void {
  program
    .command("cp")
    .description("copy files or directories into or out of a sandbox")
    .argument("<source>", "a local path, or ID:path in a sandbox")
    .argument("<destination>", "ID:path in a sandbox, or a local path")
    .addHelpText(
      "after",
      "\nExamples:\n  sandpit cp ./src ID:/mnt/user-data/workspace\n  sandpit cp ID:results ./results",
    )
    .action(
      action<[string, string], object>(async ([source, destination], o) => {
        const from = parseSpec(source);
        const to = parseSpec(destination);
        if (from && to) throw usageError("one side of cp must be a local path");
        if (!from && !to) throw usageError("one side of cp must be ID:path in a sandbox");
        const summary = to
          ? await withSandbox(o, to.id, (s) => upload(s.filesystem, source, to.path))
          : await withSandbox(o, from!.id, (s) => download(s.filesystem, from!.path, destination));
        if (o.json) printJson(summary);
      }),
    );
}

async function upload(fsys: SandboxFilesystem, local: string, remote: string): Promise<Summary> {
  const st = await fs.stat(local).catch(() => {
    throw usageError(`${local}: no such file or directory`);
  });
  const into = remote.endsWith("/") || (await remoteIsDir(fsys, remote));
  const target = into ? posix.join(remote, basename(local)) : remote;
  const plan: Plan = { dirs: [], files: [], skipped: [] };
  if (st.isDirectory()) await walkLocal(local, target, plan);
  else plan.files.push({ from: local, to: target, size: st.size });
  for (const s of plan.skipped) note(`sandpit: skipped ${s} (not a file or directory)`);
  for (const d of plan.dirs) await fsys.mkdir(d);
  const bar = progress(total(plan), "upload");
  await pool(plan.files, async (f) => {
    await fsys.writeStream(f.to, counted(createReadStream(f.from), bar));
  });
  bar.done();
  return summary(local, target, plan);
}

async function download(fsys: SandboxFilesystem, remote: string, local: string): Promise<Summary> {
  const st = await fsys.stat(remote);
  const into = await fs.stat(local).then(
    (s) => s.isDirectory(),
    () => false,
  );
  const target = into ? join(local, posix.basename(st.path)) : local;
  const plan: Plan = { dirs: [], files: [], skipped: [] };
  if (st.type === "dir") {
    plan.dirs.push(target);
    for (const e of await fsys.list(st.path, { depth: 32 })) {
      const dest = join(target, ...posix.relative(st.path, e.path).split("/"));
      if (e.type === "dir") plan.dirs.push(dest);
      else if (e.type === "file") plan.files.push({ from: e.path, to: dest, size: e.size });
      else plan.skipped.push(e.path);
    }
  } else if (st.type === "file") plan.files.push({ from: st.path, to: target, size: st.size });
  else throw usageError(`${remote} is a ${st.type}, not a file or directory`);
  for (const s of plan.skipped) note(`sandpit: skipped ${s} (not a file or directory)`);
  // Parents first: list() gives a directory before what is in it.
  for (const d of plan.dirs) await fs.mkdir(d, { recursive: true });
  const bar = progress(total(plan), "download");
  await pool(plan.files, async (f) => {
    const body = await fsys.readStream(f.from);
    await pipeline(
      Readable.fromWeb(body as import("node:stream/web").ReadableStream),
      counting(bar),
      createWriteStream(f.to),
    );
  });
  bar.done();
  return summary(remote, target, plan);
}

async function remoteIsDir(fsys: SandboxFilesystem, path: string): Promise<boolean> {
  return (await fsys.exists(path)) && (await fsys.stat(path)).type === "dir";
}

async function walkLocal(dir: string, target: string, plan: Plan): Promise<void> {
  plan.dirs.push(target);
  for (const e of await fs.readdir(dir, { withFileTypes: true })) {
    const from = join(dir, e.name);
    const to = posix.join(target, e.name);
    if (e.isDirectory()) await walkLocal(from, to, plan);
    else if (e.isFile()) plan.files.push({ from, to, size: (await fs.stat(from)).size });
    else plan.skipped.push(relative(process.cwd(), from));
  }
}

function total(plan: Plan): number {
  return plan.files.reduce((n, f) => n + f.size, 0);
}

function summary(from: string, to: string, plan: Plan): Summary {
  return { from, to, files: plan.files.length, directories: plan.dirs.length, bytes: total(plan) };
}

async function* counted(source: AsyncIterable<Buffer>, bar: Progress): AsyncIterable<Uint8Array> {
  for await (const chunk of source) {
    bar.add(chunk.length);
    yield chunk;
  }
}

function counting(bar: Progress) {
  return async function* (source: AsyncIterable<Buffer>) {
    yield* counted(source, bar);
  };
}

/** Runs `op` over `items`, PARALLEL at a time; the first failure stops the rest. */
async function pool<T>(items: T[], op: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < items.length) await op(items[next++]!);
  };
  await Promise.all(Array.from({ length: Math.min(PARALLEL, items.length) }, worker));
}

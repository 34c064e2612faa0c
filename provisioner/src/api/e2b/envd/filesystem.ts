/**
 * envd's `filesystem.Filesystem` service onto the SandboxInstance's filesystem (sandboxd's path
 * jail applies: absolute paths under /mnt/user-data, relative ones from the workspace, E2B's
 * home `/home/user` is the workspace: ./home.ts). Watches
 * are sandboxd's (inotify): streamed (`WatchDir`) or kept here and polled
 * (`CreateWatcher`/`GetWatcherEvents`/`RemoveWatcher`).
 */
import { randomUUID } from "node:crypto";
import { posix } from "node:path";
import type { IncomingMessage, ServerResponse } from "node:http";
import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import type { FilesystemEvent, SandboxFileInfo, SandboxInstance } from "@sandpit/sdk";
import { isSandboxError } from "@sandpit/sdk/errors";
import {
  readStreamRequest,
  readUnary,
  RpcError,
  sendUnary,
  ServerStream,
  type CallShape,
} from "./connect.ts";
import { messageDesc } from "./proto.ts";
import { reportAs, toSandbox } from "./home.ts";
import { stateOf, type PolledWatcher } from "./state.ts";

const d = (name: string) => messageDesc(`filesystem.${name}`);

const FILE_TYPE = { file: 1, dir: 2, symlink: 3, other: 0 } as const;
const EVENT_TYPE = { create: 1, write: 2, remove: 3, rename: 4, chmod: 5 } as const;
/** A polled watcher nobody asked for events this long is dropped (its client is gone). */
const WATCHER_IDLE_MS = 10 * 60_000;
const MAX_WATCHER_EVENTS = 10_000;

/** Go's fs.FileMode string, as envd reports it: the type letter, then rwx for each class. */
function permissions(type: SandboxFileInfo["type"], mode: number): string {
  const rwx = [6, 3, 0].map((shift) =>
    ["r", "w", "x"].map((c, i) => ((mode >> shift) & (4 >> i) ? c : "-")).join(""),
  );
  return (type === "dir" ? "d" : type === "symlink" ? "L" : "-") + rwx.join("");
}

/**
 * envd's EntryInfo. sandboxd's stat does not report owner or group: those stay empty (docs/e2b.md,
 * "Data plane").
 */
function entry(e: SandboxFileInfo, asked: string) {
  return {
    name: e.name,
    type: FILE_TYPE[e.type],
    path: reportAs(asked)(e.path),
    size: BigInt(e.size),
    ...(e.mode === undefined
      ? {}
      : { mode: e.mode & 0o777, permissions: permissions(e.type, e.mode) }),
    ...(e.modifiedTime ? { modifiedTime: timestampFromMs(e.modifiedTime.getTime()) } : {}),
  };
}

function event(root: string, e: FilesystemEvent) {
  return { name: posix.relative(root, e.path) || posix.basename(e.path), type: EVENT_TYPE[e.type] };
}

/** A missing path is envd's not_found; a file where a directory is needed, invalid_argument. */
async function stat(instance: SandboxInstance, path: string): Promise<SandboxFileInfo | undefined> {
  try {
    return await instance.filesystem.stat(toSandbox(path));
  } catch (err) {
    if (isSandboxError(err, "NOT_FOUND")) return undefined;
    throw err;
  }
}

async function directory(instance: SandboxInstance, path: string): Promise<SandboxFileInfo> {
  if (!path) throw new RpcError("invalid_argument", "path is required");
  const info = await stat(instance, path);
  if (!info) throw new RpcError("not_found", `directory '${path}' does not exist`);
  if (info.type !== "dir")
    throw new RpcError("invalid_argument", `path '${path}' is not a directory`);
  return info;
}

type Handler = (msg: never, instance: SandboxInstance) => Promise<object>;

const UNARY: Record<string, Handler> = {
  Stat: async ({ path }: { path: string }, instance) => {
    const info = await stat(instance, path);
    if (!info) throw new RpcError("not_found", `file '${path}' does not exist`);
    return { entry: entry(info, path) };
  },
  ListDir: async ({ path, depth }: { path: string; depth: number }, instance) => {
    await directory(instance, path);
    const entries = await instance.filesystem.list(toSandbox(path), { depth: Math.max(1, depth) });
    return { entries: entries.map((e) => entry(e, path)) };
  },
  MakeDir: async ({ path }: { path: string }, instance) => {
    if (!path) throw new RpcError("invalid_argument", "path is required");
    const existing = await stat(instance, path);
    if (existing?.type === "dir")
      throw new RpcError("already_exists", `directory '${path}' already exists`);
    if (existing)
      throw new RpcError("invalid_argument", `path '${path}' exists and is not a directory`);
    await instance.filesystem.mkdir(toSandbox(path));
    return { entry: entry(await instance.filesystem.stat(toSandbox(path)), path) };
  },
  Move: async ({ source, destination }: { source: string; destination: string }, instance) => {
    if (!source || !destination)
      throw new RpcError("invalid_argument", "source and destination are required");
    if (!(await stat(instance, source)))
      throw new RpcError("not_found", `file '${source}' does not exist`);
    await instance.filesystem.rename(toSandbox(source), toSandbox(destination));
    return { entry: entry(await instance.filesystem.stat(toSandbox(destination)), destination) };
  },
  Remove: async ({ path }: { path: string }, instance) => {
    if (!path) throw new RpcError("invalid_argument", "path is required");
    // As envd's os.RemoveAll: a path that is already gone is removed.
    if (await stat(instance, path)) await instance.filesystem.remove(toSandbox(path));
    return {};
  },
  CreateWatcher: async ({ path, recursive }: { path: string; recursive: boolean }, instance) => {
    const root = (await directory(instance, path)).path;
    const state = stateOf(instance);
    const now = Date.now();
    for (const [id, w] of state.watchers) {
      if (now - w.lastPoll > WATCHER_IDLE_MS) {
        state.watchers.delete(id);
        void w.stop().catch(() => undefined);
      }
    }
    const watcher: PolledWatcher = { events: [], stop: async () => undefined, lastPoll: now };
    const handle = await instance.filesystem.watch(
      root,
      (e) => {
        if (watcher.events.length < MAX_WATCHER_EVENTS) watcher.events.push(event(root, e));
      },
      { recursive },
    );
    watcher.stop = () => handle.stop();
    const id = randomUUID();
    state.watchers.set(id, watcher);
    return { watcherId: id };
  },
  GetWatcherEvents: async ({ watcherId }: { watcherId: string }, instance) => {
    const w = stateOf(instance).watchers.get(watcherId);
    if (!w) throw new RpcError("not_found", `watcher with id ${watcherId} not found`);
    w.lastPoll = Date.now();
    return { events: w.events.splice(0) };
  },
  RemoveWatcher: async ({ watcherId }: { watcherId: string }, instance) => {
    const state = stateOf(instance);
    const w = state.watchers.get(watcherId);
    if (!w) throw new RpcError("not_found", `watcher with id ${watcherId} not found`);
    state.watchers.delete(watcherId);
    await w.stop();
    return {};
  },
};

export async function serveFilesystem(
  method: string,
  req: IncomingMessage,
  res: ServerResponse,
  shape: CallShape,
  instance: SandboxInstance,
): Promise<void> {
  if (method === "WatchDir") return watchDir(req, res, shape, instance);
  const handler = UNARY[method];
  if (!handler)
    throw new RpcError("unimplemented", `filesystem.Filesystem/${method} is not a method`, 404);
  if (shape.streaming)
    throw new RpcError("invalid_argument", `filesystem.Filesystem/${method} is a unary call`, 415);
  const input = await readUnary(req, shape, d(`${method}Request`));
  const out = d(`${method}Response`);
  sendUnary(res, shape, out, create(out, (await handler(input as never, instance)) as never));
}

async function watchDir(
  req: IncomingMessage,
  res: ServerResponse,
  shape: CallShape,
  instance: SandboxInstance,
): Promise<void> {
  if (!shape.streaming)
    throw new RpcError(
      "invalid_argument",
      "filesystem.Filesystem/WatchDir is a server stream",
      415,
    );
  const desc = d("WatchDirResponse");
  const msg = (await readStreamRequest(req, shape, d("WatchDirRequest"))) as unknown as {
    path: string;
    recursive: boolean;
  };
  const out = new ServerStream(req, res, shape, desc);
  const send = (ev: object) => out.send(create(desc, { event: ev } as never) as never);
  // Events go out in order, after the start event (which tells the SDK the watch is active:
  // nothing done after it is missed).
  let chain: Promise<void> | undefined;
  const held: object[] = [];
  try {
    const root = (await directory(instance, msg.path)).path;
    const handle = await instance.filesystem.watch(
      root,
      (e) => {
        const ev = { case: "filesystem", value: event(root, e) };
        if (chain) chain = chain.then(() => send(ev));
        else held.push(ev);
      },
      { recursive: msg.recursive, signal: out.closed },
    );
    out.closed.addEventListener("abort", () => void handle.stop().catch(() => undefined));
    chain = send({ case: "start", value: {} });
    for (const ev of held.splice(0)) chain = chain.then(() => send(ev));
    out.keepalive(req, () => create(desc, { event: { case: "keepalive", value: {} } }) as never);
  } catch (err) {
    out.end(err);
  }
}

/**
 * The filesystem of sandboxd-backed sandboxes (local, docker, kubernetes): every call of the
 * contract on sandboxd's native file routes. Transfers stream both ways (a chunked upload read
 * from the caller's stream as it yields, a download handed out as it arrives), so memory stays
 * flat for any size; `signal` aborts a transfer and rejects with the signal's reason, and an
 * aborted upload leaves no file (sandboxd writes to a staging file and renames only at the end).
 */
import { checkContent, checkSource } from "../validate.ts";
import { Readable } from "node:stream";
import type {
  FileEntry,
  GlobResponse,
  GrepResponse,
  WatchStreamEvent,
} from "@sandpit/sandboxd/wire";
import { SandboxError } from "../errors.ts";
import {
  asSandboxError,
  ndjson,
  type RequestOptions,
  type SandboxdClient,
} from "../sandboxd-client.ts";
import type {
  FilesystemEvent,
  GrepMatch,
  GrepOptions,
  SandboxFileInfo,
  SandboxFilesystem,
  TransferOptions,
  WatchHandle,
} from "../types.ts";

type WithClient = <T>(op: (c: SandboxdClient) => Promise<T>) => Promise<T>;

const q = (path: string) => `path=${encodeURIComponent(path)}`;

export class SandboxdFilesystem implements SandboxFilesystem {
  private readonly with: WithClient;
  constructor(withClient: WithClient) {
    this.with = withClient;
  }

  async read(path: string, o?: TransferOptions): Promise<string> {
    return new TextDecoder().decode(await this.readBytes(path, o));
  }

  readBytes(path: string, o?: TransferOptions): Promise<Uint8Array> {
    return abortable(o?.signal, () => this.with((c) => c.readFile(path, o?.signal)));
  }

  async write(path: string, content: string | Uint8Array, o?: TransferOptions): Promise<void> {
    checkContent(content);
    await abortable(o?.signal, () => this.with((c) => c.writeFile(path, content, o?.signal)));
  }

  async append(path: string, content: string | Uint8Array, o?: TransferOptions): Promise<void> {
    checkContent(content);
    checkPath("path", path);
    await this.call("POST", `/v1/files/append?${q(path)}`, {
      body: content,
      headers: { "content-type": "application/octet-stream" },
      ...signalOf(o),
    });
  }

  async list(path: string, o: { depth?: number } = {}): Promise<SandboxFileInfo[]> {
    const depth = o.depth ?? 1;
    if (!Number.isInteger(depth) || depth < 1 || depth > 32)
      throw new SandboxError("depth must be an integer from 1 to 32", "INVALID_ARGUMENT");
    const { entries } = await this.with((c) => c.list(path, depth));
    return entries.map(toInfo);
  }

  async stat(path: string): Promise<SandboxFileInfo> {
    return toInfo(await this.with((c) => c.stat(path)));
  }

  exists(path: string): Promise<boolean> {
    // NOT_FOUND is caught inside the call, so only sandboxd's "no such file" means false; a
    // sandbox that is gone still surfaces as an error.
    return this.with(async (c) => {
      try {
        await c.stat(path);
        return true;
      } catch (err) {
        if (err instanceof SandboxError && err.code === "NOT_FOUND") return false;
        throw err;
      }
    });
  }

  mkdir(path: string): Promise<void> {
    return this.with((c) => c.mkdir(path));
  }

  remove(path: string): Promise<void> {
    return this.with((c) => c.remove(path, true));
  }

  async rename(from: string, to: string): Promise<void> {
    checkPath("from", from);
    checkPath("to", to);
    await this.call("POST", "/v1/files/rename", json({ from, to }));
  }

  async glob(pattern: string, o: { cwd?: string } = {}): Promise<string[]> {
    checkPath("pattern", pattern);
    const r = await this.call<GlobResponse>(
      "POST",
      "/v1/files/glob",
      json({ pattern, ...(o.cwd === undefined ? {} : { cwd: o.cwd }) }),
    );
    return r.paths;
  }

  async grep(pattern: string, o: GrepOptions = {}): Promise<GrepMatch[]> {
    checkPath("pattern", pattern);
    const body = Object.fromEntries(
      Object.entries({
        pattern,
        path: o.path,
        glob: o.glob,
        ignoreCase: o.ignoreCase,
        literal: o.literal,
        maxMatches: o.maxMatches,
      }).filter(([, v]) => v !== undefined),
    );
    return (await this.call<GrepResponse>("POST", "/v1/files/grep", json(body))).matches;
  }

  async watch(
    path: string,
    onEvent: (event: FilesystemEvent) => void,
    o: { recursive?: boolean; signal?: AbortSignal } = {},
  ): Promise<WatchHandle> {
    checkPath("path", path);
    if (typeof onEvent !== "function")
      throw new SandboxError("onEvent must be a function", "INVALID_ARGUMENT");
    o.signal?.throwIfAborted();
    // The request resolves once sandboxd's watch is active: changes after this call are seen.
    const stopper = new AbortController();
    const signal = o.signal ? AbortSignal.any([o.signal, stopper.signal]) : stopper.signal;
    const body = await abortable(signal, () =>
      this.with((c) =>
        c.send("GET", `/v1/files/watch?${q(path)}&recursive=${o.recursive === true}`, {
          headers: { accept: "application/x-ndjson" },
          signal,
        }),
      ),
    );
    const pump = (async () => {
      try {
        for await (const e of ndjson<WatchStreamEvent>(body)) {
          // A failed watch ends the stream; the contract has no error callback, so it just stops.
          if (e.type === "error") break;
          onEvent({ type: e.type, path: e.path });
        }
      } catch {
        // stopped (aborted) or the connection went away: no more events either way
      }
    })();
    return {
      stop: async () => {
        stopper.abort();
        body.destroy();
        await pump;
      },
    };
  }

  async readStream(path: string, o?: TransferOptions): Promise<ReadableStream<Uint8Array>> {
    checkPath("path", path);
    const body = await this.transfer("GET", `/v1/files?${q(path)}`, signalOf(o));
    const chunks = (body as AsyncIterable<Uint8Array>)[Symbol.asyncIterator]();
    // Pulled one chunk at a time: nothing is read from the socket before the reader asks.
    return new ReadableStream<Uint8Array>({
      async pull(controller) {
        try {
          const { value, done } = await chunks.next();
          if (done) controller.close();
          else controller.enqueue(value);
        } catch (err) {
          controller.error(
            o?.signal?.aborted ? o.signal.reason : asSandboxError(err, `reading ${path}`),
          );
        }
      },
      cancel() {
        body.destroy();
      },
    });
  }

  async writeStream(
    path: string,
    data: ReadableStream<Uint8Array> | AsyncIterable<Uint8Array>,
    o?: TransferOptions,
  ): Promise<void> {
    checkPath("path", path);
    checkSource(data);
    let sourceError: unknown;
    async function* bytes(): AsyncGenerator<Uint8Array> {
      try {
        for await (const chunk of data as AsyncIterable<unknown>) {
          if (!(chunk instanceof Uint8Array))
            throw new SandboxError("data must yield Uint8Array chunks", "INVALID_ARGUMENT");
          yield chunk;
        }
      } catch (err) {
        sourceError = err;
        throw err;
      }
    }
    try {
      const res = await this.transfer("PUT", `/v1/files?${q(path)}`, {
        // Chunked: sent as the source yields it. A source that fails cuts the upload, which
        // sandboxd then discards.
        body: Readable.from(bytes(), { objectMode: false }),
        headers: { "content-type": "application/octet-stream" },
        ...signalOf(o),
      });
      await res.dump();
    } catch (err) {
      if (sourceError !== undefined && !o?.signal?.aborted) throw sourceError;
      throw err;
    }
  }

  /** A request whose answer is JSON. */
  private async call<T = unknown>(
    method: "GET" | "POST",
    path: string,
    o: RequestOptions,
  ): Promise<T> {
    const body = await this.transfer(method, path, o);
    try {
      return (await body.json()) as T;
    } catch (err) {
      throw o.signal?.aborted ? o.signal.reason : asSandboxError(err, `${method} ${path}`);
    }
  }

  private transfer(method: "GET" | "POST" | "PUT", path: string, o: RequestOptions) {
    return abortable(o.signal, () => this.with((c) => c.send(method, path, o)));
  }
}

/** Runs `op`; when `signal` aborted it, rejects with the signal's reason (the web platform's rule). */
async function abortable<T>(signal: AbortSignal | undefined, op: () => Promise<T>): Promise<T> {
  signal?.throwIfAborted();
  try {
    return await op();
  } catch (err) {
    if (signal?.aborted) throw signal.reason;
    throw err;
  }
}

function signalOf(o?: TransferOptions): { signal?: AbortSignal } {
  return o?.signal ? { signal: o.signal } : {};
}

function json(body: unknown): RequestOptions {
  return { body: JSON.stringify(body), headers: { "content-type": "application/json" } };
}

function checkPath(name: string, value: unknown): void {
  if (typeof value !== "string" || value.length === 0)
    throw new SandboxError(`${name} must be a non-empty string`, "INVALID_ARGUMENT");
}

function toInfo(e: FileEntry): SandboxFileInfo {
  return {
    name: e.name,
    path: e.path,
    type: e.type,
    size: e.size,
    modifiedTime: new Date(e.modifiedMs),
    ...(e.mode === undefined ? {} : { mode: e.mode }),
  };
}

/**
 * A loopback E2B: the control plane (REST JSON under /v2/sandboxes and /sandboxes), envd (REST
 * /files and /health, Connect-RPC in JSON mode for process.Process and filesystem.Filesystem)
 * and the code interpreter (/contexts, NDJSON /execute), all on one 127.0.0.1 port. Point the
 * SDK at it with `apiUrl` and `sandboxUrl` both set to `url`; data-plane requests are told
 * apart by the E2b-Sandbox-Id / E2b-Sandbox-Port headers, exactly as the SDK sends them.
 *
 * Everything runs for real in a FakeSandboxHost (bubblewrap, /mnt/user-data, /home/user).
 * Differences from E2B worth knowing: JavaScript/TypeScript cells without a context are separate
 * processes (E2B's default contexts keep state; the fake's Python default context does), each
 * context's kernel is a stand-in for Jupyter's (Python: test/fakes/e2b-kernel.py; TypeScript:
 * sandboxd's own Node kernel behind an adapter), and `Remove` of a missing path succeeds (as
 * envd's os.RemoveAll does).
 */
import type { ChildProcess } from "node:child_process";
import { createHash, randomBytes, randomUUID, timingSafeEqual } from "node:crypto";
import { constants as osConstants } from "node:os";
import * as fs from "node:fs/promises";
import type { IncomingMessage, ServerResponse } from "node:http";
import { type FSWatcher, createReadStream, createWriteStream, readFileSync, watch } from "node:fs";
import { createInterface } from "node:readline";
import { pipeline } from "node:stream/promises";
import { dirname, join, posix } from "node:path";
import type { IPty } from "node-pty";
import { FakeServer, parseMultipart, readBody, readJson, sendEmpty, sendJson } from "./http.ts";
import { listEntries, permissions, statEntry, writeFileAtomic, type Entry } from "./files.ts";
import { FakeSandboxHost, RUNNERS_MOUNT, userPipEnv, type FakeSandbox } from "./sandbox-host.ts";

export const E2B_FAKE_API_KEY = `e2b_${"0".repeat(40)}`;
const ENVD_PORT = "49983";
const JUPYTER_PORT = "49999";
const HOME = "/home/user";
/** The templates every E2B account has: the SDKs' defaults. Any other is E2B's 404. */
const TEMPLATES = new Set(["base", "code-interpreter-v1"]);

interface E2BData {
  templateID: string;
  metadata: Record<string, string>;
  startedAt: Date;
  /** When the sandbox's timeout passes (ms since the epoch); meaningless while paused. */
  endAt: number;
  /** What the timeout does: E2B kills by default, or pauses when created with autoPause. */
  onTimeout: "kill" | "pause";
  expiry?: NodeJS.Timeout;
  /** The API key that made it (its quota counts it). */
  owner: string;
  allowInternetAccess?: boolean;
  network?: { allowOut?: string[]; denyOut?: string[] };
  token: string;
  processes: Map<number, Proc>;
  contexts: Map<string, CodeContext>;
  /** The polled watchers (CreateWatcher): events kept until GetWatcherEvents takes them. */
  watchers: Map<string, { watcher: FSWatcher; events: { name: string; type: string }[] }>;
  /** Python's default context (what a Python cell without context_id runs in), made on use. */
  defaults: Map<string, CodeContext>;
  /** Stateless JavaScript/TypeScript cells run so far. */
  executions: number;
  /** Cells and watch streams being answered: a kill cuts them off, as E2B's VM going away does. */
  running: Set<ServerResponse>;
}

const data = (s: FakeSandbox) => s.data as unknown as E2BData;

/**
 * A code-interpreter context: one kernel process whose namespace lives across cells (as E2B's
 * Jupyter kernels do, its JavaScript/TypeScript kernel included).
 */
interface CodeContext {
  id: string;
  language: string;
  cwd: string;
  kernel?: Kernel;
}

/** A running kernel: cells are queued, one at a time, each with its event sink. */
interface Kernel {
  child: ChildProcess;
  queue: Promise<void>;
  /** Gets the running cell's events as the code interpreter's NDJSON lines. */
  sink: ((line: string) => void) | null;
  dead: Promise<void>;
  /** Hands a cell to the kernel. */
  send(code: string, envs: Record<string, string>): void;
}

const KERNEL_SOURCE = readFileSync(new URL("./e2b-kernel.py", import.meta.url), "utf8");

/** One envd process: a piped child or a terminal, its config, and who is streaming it. */
interface Proc {
  pid: number;
  config: { cmd: string; args: string[]; envs: Record<string, string>; cwd: string };
  tag?: string;
  child?: ChildProcess;
  term?: IPty;
  /** Stream writers (Start's and each Connect's), each given every event as it happens. */
  listeners: Set<(event: unknown) => void>;
}

/** envd's Signal enum (JSON names and numbers) as Node signal names. */
const SIGNALS: Record<string, NodeJS.Signals> = {
  SIGNAL_SIGKILL: "SIGKILL",
  "9": "SIGKILL",
  SIGNAL_SIGTERM: "SIGTERM",
  "15": "SIGTERM",
};

export class FakeE2B {
  readonly host = new FakeSandboxHost({
    home: HOME,
    imageEnv: (s) => ({ ...userPipEnv(s), NO_COLOR: "1" }),
  });
  readonly server: FakeServer;
  url = "";
  apiKey = E2B_FAKE_API_KEY;
  envdVersion = "0.5.7";
  /** Further API keys, each allowed this many sandboxes at once (E2B's concurrency quota). */
  private readonly quotas: Record<string, number>;

  constructor(options: { quotas?: Record<string, number> } = {}) {
    this.quotas = options.quotas ?? {};
    this.server = new FakeServer((req, res, url) => this.route(req, res, url));
  }

  async start(): Promise<string> {
    this.url = await this.server.listen();
    return this.url;
  }

  async close(): Promise<void> {
    for (const sbx of this.host.all()) this.stopWatching(sbx);
    await this.server.close();
    await this.host.close();
  }

  private async route(req: IncomingMessage, res: ServerResponse, url: URL): Promise<void> {
    const sid = req.headers["e2b-sandbox-id"];
    if (typeof sid === "string")
      return this.dataPlane(
        sid,
        String(req.headers["e2b-sandbox-port"] ?? ENVD_PORT),
        req,
        res,
        url,
      );
    // A signed /files URL reaches the data plane with neither sandbox headers nor a key.
    if (url.pathname === "/files" && url.searchParams.has("signature")) {
      const signed = this.host.all().find((s) => signatureValid(url, req.method, data(s).token));
      if (!signed) {
        await readBody(req);
        return sendJson(res, 401, { code: 401, message: "invalid or expired signature" });
      }
      return this.dataPlane(signed.id, ENVD_PORT, req, res, url);
    }
    const key = req.headers["x-api-key"];
    if (typeof key !== "string" || (key !== this.apiKey && !(key in this.quotas)))
      return sendJson(res, 401, { code: 401, message: "Invalid API key" });
    const p = url.pathname.replace(/^\/v2\//, "/");
    const m = /^\/sandboxes(?:\/([^/]+))?(?:\/(connect|resume|pause|timeout))?$/.exec(p);
    if (!m)
      return sendJson(res, 404, { code: 404, message: `no route ${req.method} ${url.pathname}` });
    const [, id, action] = m;
    if (!id) {
      if (req.method === "POST") return this.create(req, res, key);
      if (req.method === "GET") return this.list(res, url);
    }
    const sbx = id ? this.host.get(id) : undefined;
    if (!sbx) return sendJson(res, 404, { code: 404, message: `sandbox ${id} not found` });
    if (req.method === "GET" && !action) return sendJson(res, 200, this.detail(sbx));
    if (req.method === "DELETE" && !action) {
      await this.kill(sbx);
      return sendEmpty(res, 204);
    }
    if (req.method === "POST" && action === "pause") {
      if (sbx.state === "paused")
        return sendJson(res, 409, { code: 409, message: "sandbox is already paused" });
      this.pause(sbx);
      return sendEmpty(res, 204);
    }
    if (req.method === "POST" && (action === "connect" || action === "resume")) {
      const body = await readJson<{ timeout?: number }>(req);
      const resumed = sbx.state === "paused";
      const wanted = Date.now() + (body.timeout ?? 300) * 1000;
      // A running sandbox's timeout only grows on connect; a resumed one starts afresh.
      this.expireAt(sbx, resumed ? wanted : Math.max(wanted, data(sbx).endAt));
      sbx.state = "running";
      return sendJson(res, resumed ? 201 : 200, this.summary(sbx));
    }
    if (req.method === "POST" && action === "timeout") {
      const body = await readJson<{ timeout?: number }>(req);
      if (typeof body.timeout !== "number" || body.timeout < 0)
        return sendJson(res, 400, { code: 400, message: "timeout must be a number of seconds" });
      this.expireAt(sbx, Date.now() + body.timeout * 1000);
      return sendEmpty(res, 204);
    }
    return sendJson(res, 405, { code: 405, message: "method not allowed" });
  }

  private async create(req: IncomingMessage, res: ServerResponse, key: string): Promise<void> {
    const body = await readJson<{
      templateID?: string;
      metadata?: Record<string, string>;
      envVars?: Record<string, string>;
      timeout?: number;
      allow_internet_access?: boolean;
      network?: { allowOut?: string[]; denyOut?: string[] };
      autoPause?: boolean;
    }>(req);
    const templateID = body.templateID ?? "base";
    if (!TEMPLATES.has(templateID))
      return sendJson(res, 404, { code: 404, message: `template '${templateID}' not found` });
    const quota = this.quotas[key];
    if (quota !== undefined && this.host.all().filter((s) => data(s).owner === key).length >= quota)
      return sendJson(res, 429, {
        code: 429,
        message: `you have reached the maximum number of concurrent sandboxes (${quota})`,
      });
    const id = `i${randomBytes(8).toString("hex")}`;
    const sbx = await this.host.create(id, body.envVars ?? {});
    const d: E2BData = {
      templateID,
      metadata: body.metadata ?? {},
      startedAt: new Date(),
      endAt: 0,
      onTimeout: body.autoPause ? "pause" : "kill",
      owner: key,
      ...(body.allow_internet_access === false ? { allowInternetAccess: false } : {}),
      ...(body.network ? { network: body.network } : {}),
      token: randomBytes(16).toString("hex"),
      processes: new Map(),
      contexts: new Map(),
      defaults: new Map(),
      watchers: new Map(),
      executions: 0,
      running: new Set(),
    };
    Object.assign(sbx.data, d);
    this.expireAt(sbx, Date.now() + (body.timeout ?? 300) * 1000);
    sendJson(res, 201, this.summary(sbx));
  }

  /** Arms the sandbox's timeout: when it passes, the sandbox is killed (or auto-paused). */
  private expireAt(sbx: FakeSandbox, endAt: number): void {
    const d = data(sbx);
    clearTimeout(d.expiry);
    d.endAt = endAt;
    d.expiry = setTimeout(
      () => {
        if (sbx.state !== "running") return;
        if (d.onTimeout === "pause") this.pause(sbx);
        else void this.kill(sbx);
      },
      Math.max(0, endAt - Date.now()),
    );
    d.expiry.unref();
  }

  private pause(sbx: FakeSandbox): void {
    this.stopWatching(sbx);
    this.host.pause(sbx);
  }

  private async kill(sbx: FakeSandbox): Promise<void> {
    this.stopWatching(sbx);
    for (const res of data(sbx).running) res.destroy();
    await this.host.kill(sbx);
  }

  /** Ends the sandbox's timeout and polled watchers (neither outlives a pause or a kill). */
  private stopWatching(sbx: FakeSandbox): void {
    const d = data(sbx);
    clearTimeout(d.expiry);
    for (const w of d.watchers.values()) w.watcher.close();
    d.watchers.clear();
  }

  private summary(sbx: FakeSandbox) {
    const d = data(sbx);
    return {
      sandboxID: sbx.id,
      templateID: d.templateID,
      clientID: "fake",
      envdVersion: this.envdVersion,
      envdAccessToken: d.token,
      domain: null,
    };
  }

  private detail(sbx: FakeSandbox) {
    const d = data(sbx);
    return {
      ...this.summary(sbx),
      alias: d.templateID,
      startedAt: d.startedAt.toISOString(),
      endAt: new Date(d.endAt).toISOString(),
      ...(d.allowInternetAccess === false ? { allowInternetAccess: false } : {}),
      ...(d.network ? { network: d.network } : {}),
      cpuCount: 2,
      memoryMB: 512,
      diskSizeMB: 1024,
      metadata: d.metadata,
      state: sbx.state === "paused" ? "paused" : "running",
    };
  }

  /** GET /v2/sandboxes: filtered, oldest first, `limit` at a time with an x-next-token. */
  private list(res: ServerResponse, url: URL): void {
    // The SDK sends metadata as one query value holding `k=v&k2=v2`, each part URI-encoded.
    const wanted = new URLSearchParams(url.searchParams.get("metadata") ?? "");
    const states = (url.searchParams.get("state") ?? "running").split(",");
    const out = this.host
      .all()
      .filter((s) => states.includes(s.state === "paused" ? "paused" : "running"))
      .filter((s) =>
        [...wanted].every(
          ([k, v]) => data(s).metadata[decodeURIComponent(k)] === decodeURIComponent(v),
        ),
      )
      .sort((a, b) => data(a).startedAt.getTime() - data(b).startedAt.getTime())
      .map((s) => this.detail(s));
    // The token is the id of the first sandbox of the next page.
    const token = url.searchParams.get("nextToken");
    const from = token
      ? Math.max(
          0,
          out.findIndex((s) => s.sandboxID === token),
        )
      : 0;
    const limit = Number(url.searchParams.get("limit") ?? 100) || 100;
    const page = out.slice(from, from + limit);
    const next = out[from + limit];
    sendJson(res, 200, page, next ? { "x-next-token": next.sandboxID } : {});
  }

  // ---- data plane ---------------------------------------------------------------------------

  private async dataPlane(
    sid: string,
    port: string,
    req: IncomingMessage,
    res: ServerResponse,
    url: URL,
  ): Promise<void> {
    const sbx = this.host.get(sid);
    // E2B's edge answers 502 for sandboxes that are not running (paused, killed, timed out).
    if (!sbx || sbx.state !== "running") {
      await readBody(req);
      res.writeHead(502, { "content-type": "text/plain" });
      res.end(`The sandbox ${sid} was not found or is not running`);
      return;
    }
    // The code interpreter is reached through the edge proxy without envd's access token.
    if (port === JUPYTER_PORT) return this.jupyter(sbx, req, res, url);
    const signed = url.pathname === "/files" && signatureValid(url, req.method, data(sbx).token);
    if (req.headers["x-access-token"] !== data(sbx).token && !signed)
      return sendJson(res, 401, { code: 401, message: "invalid access token" });
    const p = url.pathname;
    if (p === "/health") return sendEmpty(res, 204);
    if (p === "/files" && req.method === "GET") return this.readFile(sbx, res, url);
    if (p === "/files" && req.method === "POST") return this.writeFile(sbx, req, res, url);
    if (p === "/process.Process/Start") return this.startProcess(sbx, req, res);
    if (p === "/process.Process/Connect") return this.connectProcess(sbx, req, res);
    if (p === "/filesystem.Filesystem/WatchDir") return this.watchDir(sbx, req, res);
    const rpc = /^\/(process\.Process|filesystem\.Filesystem)\/(\w+)$/.exec(p);
    if (rpc) {
      const body = await readJson<Record<string, unknown>>(req);
      try {
        return sendJson(res, 200, await this.unary(sbx, rpc[1]!, rpc[2]!, body));
      } catch (err) {
        const e = err as RpcError;
        if (!(e instanceof RpcError)) throw err;
        return sendJson(res, e.status, { code: e.code, message: e.message });
      }
    }
    sendJson(res, 404, { code: 404, message: `no route ${p}` });
  }

  private async resolve(sbx: FakeSandbox, path: string | null): Promise<string> {
    const host = path ? await sbx.hostPath(path) : null;
    if (!host) throw new RpcError("permission_denied", 403, `path ${path} is not accessible`);
    return host;
  }

  private async readFile(sbx: FakeSandbox, res: ServerResponse, url: URL): Promise<void> {
    const host = await sbx.hostPath(url.searchParams.get("path") ?? "");
    const st = host ? await fs.stat(host).catch(() => null) : null;
    if (!host || !st)
      return sendJson(res, 404, {
        code: 404,
        message: `path '${url.searchParams.get("path")}' does not exist`,
      });
    if (st.isDirectory()) return sendJson(res, 400, { code: 400, message: "path is a directory" });
    res.writeHead(200, {
      "content-type": "application/octet-stream",
      "content-length": String(st.size),
    });
    await pipeline(createReadStream(host), res).catch(() => res.destroy());
  }

  private async writeFile(
    sbx: FakeSandbox,
    req: IncomingMessage,
    res: ServerResponse,
    url: URL,
  ): Promise<void> {
    const type = req.headers["content-type"] ?? "";
    // envd streams an octet-stream upload to the file (what the SDK sends for stream bodies).
    if (type.startsWith("application/octet-stream")) {
      const target = url.searchParams.get("path") ?? "";
      const host = await sbx.hostPath(target);
      if (!host)
        return sendJson(res, 403, { code: 403, message: `path ${target} is not writable` });
      if ((await fs.stat(host).catch(() => null))?.isDirectory())
        return sendJson(res, 400, { code: 400, message: `path ${target} is a directory` });
      await fs.mkdir(dirname(host), { recursive: true });
      // Staged beside the sandbox's directories, not in them: the client's abort returns before
      // the server sees it, and the half-written file must not show up in a listing meanwhile.
      const tmp = join(sbx.root, `.fake-upload-${randomBytes(4).toString("hex")}`);
      try {
        await pipeline(req, createWriteStream(tmp));
        await fs.rename(tmp, host);
      } catch {
        await fs.rm(tmp, { force: true });
        return;
      }
      return sendJson(res, 200, [
        { name: posix.basename(target), type: "file", path: sbx.virtualPath(host) },
      ]);
    }
    const body = await readBody(req);
    const files: { path: string; data: Buffer }[] = [];
    if (type.startsWith("multipart/form-data")) {
      for (const part of parseMultipart(body, type)) {
        if (part.name === "file")
          files.push({
            path: url.searchParams.get("path") ?? part.filename ?? "",
            data: part.data,
          });
      }
    } else {
      files.push({ path: url.searchParams.get("path") ?? "", data: body });
    }
    const out = [];
    for (const f of files) {
      const host = await sbx.hostPath(f.path);
      if (!host)
        return sendJson(res, 403, { code: 403, message: `path ${f.path} is not writable` });
      const st = await fs.stat(host).catch(() => null);
      if (st?.isDirectory())
        return sendJson(res, 400, { code: 400, message: `path ${f.path} is a directory` });
      await writeFileAtomic(host, f.data);
      out.push({ name: posix.basename(f.path), type: "file", path: sbx.virtualPath(host) });
    }
    sendJson(res, 200, out);
  }

  private async unary(
    sbx: FakeSandbox,
    service: string,
    method: string,
    body: Record<string, unknown>,
  ): Promise<unknown> {
    const d = data(sbx);
    if (service === "filesystem.Filesystem" && method === "Move") {
      const from = await this.resolve(sbx, typeof body.source === "string" ? body.source : null);
      const to = await this.resolve(
        sbx,
        typeof body.destination === "string" ? body.destination : null,
      );
      if (!(await statEntry(sbx, from)))
        throw new RpcError("not_found", 404, `no such file or directory: ${body.source}`);
      await fs.mkdir(dirname(to), { recursive: true });
      await fs.rename(from, to).catch((err: NodeJS.ErrnoException) => {
        throw new RpcError("invalid_argument", 400, `cannot move: ${err.code ?? err.message}`);
      });
      return { entry: entryJson((await statEntry(sbx, to))!) };
    }
    if (service === "filesystem.Filesystem" && method === "GetWatcherEvents") {
      const w = d.watchers.get(String(body.watcherId));
      if (!w) throw new RpcError("not_found", 404, `watcher ${body.watcherId} not found`);
      return { events: w.events.splice(0) };
    }
    if (service === "filesystem.Filesystem" && method === "RemoveWatcher") {
      const w = d.watchers.get(String(body.watcherId));
      if (!w) throw new RpcError("not_found", 404, `watcher ${body.watcherId} not found`);
      w.watcher.close();
      d.watchers.delete(String(body.watcherId));
      return {};
    }
    if (service === "filesystem.Filesystem") {
      const host = await this.resolve(sbx, typeof body.path === "string" ? body.path : null);
      switch (method) {
        case "Stat": {
          const e = await statEntry(sbx, host);
          if (!e) throw new RpcError("not_found", 404, `no such file or directory: ${body.path}`);
          return { entry: entryJson(e) };
        }
        case "ListDir": {
          const e = await statEntry(sbx, host);
          if (!e) throw new RpcError("not_found", 404, `directory not found: ${body.path}`);
          if (e.type !== "dir")
            throw new RpcError("invalid_argument", 400, `path is not a directory: ${body.path}`);
          const depth = Number(body.depth ?? 1) || 1;
          const out: Entry[] = [];
          const walk = async (dir: string, level: number) => {
            for (const entry of await listEntries(sbx, dir)) {
              out.push(entry);
              if (entry.type === "dir" && level < depth)
                await walk(join(dir, entry.name), level + 1);
            }
          };
          await walk(host, 1);
          return { entries: out.map(entryJson) };
        }
        case "MakeDir": {
          const e = await statEntry(sbx, host);
          if (e?.type === "dir")
            throw new RpcError("already_exists", 409, `directory already exists: ${body.path}`);
          if (e)
            throw new RpcError(
              "invalid_argument",
              400,
              `path exists and is not a directory: ${body.path}`,
            );
          await fs.mkdir(host, { recursive: true });
          return { entry: entryJson((await statEntry(sbx, host))!) };
        }
        case "Remove":
          await fs.rm(host, { recursive: true, force: true });
          return {};
        case "CreateWatcher": {
          const e = await statEntry(sbx, host);
          if (e?.type !== "dir")
            throw new RpcError("not_found", 404, `directory ${body.path} not found`);
          const id = randomUUID();
          const events: { name: string; type: string }[] = [];
          const watcher = watchEvents(host, Boolean(body.recursive), (ev) => events.push(ev));
          d.watchers.set(id, { watcher, events });
          return { watcherId: id };
        }
      }
    }
    if (service === "process.Process") {
      if (method === "List")
        return {
          processes: [...d.processes.values()].map((p) => ({
            pid: p.pid,
            config: p.config,
            ...(p.tag !== undefined ? { tag: p.tag } : {}),
          })),
        };
      const pid = Number((body.process as { pid?: number } | undefined)?.pid);
      const proc = d.processes.get(pid);
      if (!proc) throw new RpcError("not_found", 404, `process with pid ${pid} not found`);
      switch (method) {
        case "SendInput": {
          const input = body.input as { stdin?: string; pty?: string } | undefined;
          if (input?.pty !== undefined) proc.term?.write(Buffer.from(input.pty, "base64"));
          else proc.child?.stdin?.write(Buffer.from(input?.stdin ?? "", "base64"));
          return {};
        }
        case "CloseStdin":
          proc.child?.stdin?.end();
          return {};
        case "SendSignal": {
          const sig = SIGNALS[String(body.signal)];
          if (!sig)
            throw new RpcError("invalid_argument", 400, `unsupported signal ${body.signal}`);
          if (sig === "SIGKILL") sbx.killGroup(pid);
          else process.kill(-pid, sig);
          return {};
        }
        case "Update": {
          const size = (body.pty as { size?: { cols?: number; rows?: number } } | undefined)?.size;
          if (!proc.term) throw new RpcError("invalid_argument", 400, `process ${pid} has no pty`);
          if (size?.cols && size.rows) proc.term.resize(size.cols, size.rows);
          return {};
        }
      }
    }
    throw new RpcError("unimplemented", 501, `${service}/${method} is not implemented by the fake`);
  }

  /** process.Process/Start: a Connect server stream of start, data and end events. */
  private async startProcess(
    sbx: FakeSandbox,
    req: IncomingMessage,
    res: ServerResponse,
  ): Promise<void> {
    const body = await readBody(req);
    const msg = JSON.parse(body.subarray(5).toString("utf8")) as {
      process: { cmd: string; args?: string[]; envs?: Record<string, string>; cwd?: string };
      pty?: { size?: { cols?: number; rows?: number } };
      tag?: string;
      stdin?: boolean;
    };
    res.writeHead(200, { "content-type": "application/connect+json" });
    const cwd = msg.process.cwd ?? HOME;
    const cwdHost = await sbx.hostPath(cwd);
    // Paths outside the mounted directories (/, /tmp, ...) are the image's own; bwrap checks those.
    if (cwdHost && !(await fs.stat(cwdHost).catch(() => null))?.isDirectory()) {
      res.write(
        envelope(2, {
          error: { code: "invalid_argument", message: `cwd '${cwd}' does not exist` },
        }),
      );
      res.end();
      return;
    }
    const argv = [msg.process.cmd, ...(msg.process.args ?? [])];
    const envs = msg.process.envs ?? {};
    const proc: Proc = {
      pid: 0,
      config: { cmd: msg.process.cmd, args: msg.process.args ?? [], envs, cwd },
      ...(msg.tag !== undefined ? { tag: msg.tag } : {}),
      listeners: new Set(),
    };
    const emit = (event: unknown) => proc.listeners.forEach((l) => l(event));
    let exited: Promise<{ exitCode: number; signal: string | null }>;
    if (msg.pty) {
      const term = await sbx.spawnPty(argv, {
        cwd,
        env: envs,
        cols: msg.pty.size?.cols ?? 80,
        rows: msg.pty.size?.rows ?? 24,
      });
      proc.term = term;
      proc.pid = term.pid;
      term.onData((d: string | Buffer) =>
        emit({ data: { pty: Buffer.from(d).toString("base64") } }),
      );
      exited = new Promise((resolve) =>
        // As Go's ProcessState reports it: exit code -1 for a process a signal ended.
        term.onExit(({ exitCode, signal }) =>
          resolve(
            signal ? { exitCode: -1, signal: signalName(signal) } : { exitCode, signal: null },
          ),
        ),
      );
    } else {
      const child = await sbx.spawn(argv, { cwd, env: envs });
      proc.child = child;
      proc.pid = child.pid!;
      if (!msg.stdin) child.stdin?.end();
      child.stdout?.on("data", (c: Buffer) => emit({ data: { stdout: c.toString("base64") } }));
      child.stderr?.on("data", (c: Buffer) => emit({ data: { stderr: c.toString("base64") } }));
      exited = new Promise((resolve) =>
        child.once("close", (code, signal) => resolve({ exitCode: code ?? -1, signal })),
      );
    }
    data(sbx).processes.set(proc.pid, proc);
    this.follow(proc, res);
    // envd ends a process when the deadline its Start call carries (Connect-Timeout-Ms) passes.
    const deadline = Number(req.headers["connect-timeout-ms"] ?? 0);
    const timer = deadline > 0 ? setTimeout(() => sbx.killGroup(proc.pid), deadline) : undefined;
    // A dropped client does not stop the process (envd keeps it; the SDK can reconnect).
    void exited.then(({ exitCode, signal }) => {
      clearTimeout(timer);
      data(sbx).processes.delete(proc.pid);
      const status = signal
        ? `signal: ${GO_SIGNAL_TEXT[signal] ?? signal}`
        : `exit status ${exitCode}`;
      // envd's error is Go's cmd.Wait() error text, which for a failed process is its status.
      const failed = signal !== null || exitCode !== 0;
      emit({
        end: { exitCode, exited: signal === null, status, ...(failed ? { error: status } : {}) },
      });
      emit(null);
    });
  }

  /** process.Process/Connect: the same stream as Start's, from the moment of attaching. */
  private async connectProcess(
    sbx: FakeSandbox,
    req: IncomingMessage,
    res: ServerResponse,
  ): Promise<void> {
    const body = await readBody(req);
    const msg = JSON.parse(body.subarray(5).toString("utf8")) as { process?: { pid?: number } };
    const proc = data(sbx).processes.get(Number(msg.process?.pid));
    res.writeHead(200, { "content-type": "application/connect+json" });
    if (!proc) {
      res.write(
        envelope(2, {
          error: { code: "not_found", message: `process with pid ${msg.process?.pid} not found` },
        }),
      );
      res.end();
      return;
    }
    this.follow(proc, res);
  }

  /** Streams a process's events to one response: start, then data and end (null closes). */
  private follow(proc: Proc, res: ServerResponse): void {
    res.write(envelope(0, { event: { start: { pid: proc.pid } } }));
    const listener = (event: unknown) => {
      if (event === null) {
        res.write(envelope(2, {}));
        res.end();
        proc.listeners.delete(listener);
      } else res.write(envelope(0, { event }));
    };
    proc.listeners.add(listener);
    res.once("close", () => proc.listeners.delete(listener));
  }

  /** filesystem.Filesystem/WatchDir: inotify (fs.watch) events as envd's FilesystemEvent. */
  private async watchDir(
    sbx: FakeSandbox,
    req: IncomingMessage,
    res: ServerResponse,
  ): Promise<void> {
    const body = await readBody(req);
    const msg = JSON.parse(body.subarray(5).toString("utf8")) as {
      path?: string;
      recursive?: boolean;
    };
    res.writeHead(200, { "content-type": "application/connect+json" });
    const host = msg.path ? await sbx.hostPath(msg.path) : null;
    const st = host ? await fs.stat(host).catch(() => null) : null;
    if (!host || !st?.isDirectory()) {
      res.write(
        envelope(2, {
          error: { code: "not_found", message: `directory ${msg.path} not found` },
        }),
      );
      res.end();
      return;
    }
    const watcher = watchEvents(host, Boolean(msg.recursive), (event) =>
      res.write(envelope(0, { filesystem: event })),
    );
    res.write(envelope(0, { start: {} }));
    // A kill cuts the stream off, as E2B's VM going away does.
    data(sbx).running.add(res);
    res.once("close", () => {
      watcher.close();
      data(sbx).running.delete(res);
    });
  }

  // ---- code interpreter ----------------------------------------------------------------------

  private async jupyter(
    sbx: FakeSandbox,
    req: IncomingMessage,
    res: ServerResponse,
    url: URL,
  ): Promise<void> {
    const d = data(sbx);
    const p = url.pathname;
    if (p === "/contexts" && req.method === "POST") {
      const body = await readJson<{ language?: string; cwd?: string }>(req);
      const ctx = {
        id: randomUUID(),
        language: normaliseLanguage(body.language),
        cwd: body.cwd ?? HOME,
      };
      d.contexts.set(ctx.id, ctx);
      return sendJson(res, 200, { id: ctx.id, language: ctx.language, cwd: ctx.cwd });
    }
    if (p === "/contexts" && req.method === "GET")
      return sendJson(
        res,
        200,
        [...d.contexts.values()].map((c) => ({ id: c.id, language: c.language, cwd: c.cwd })),
      );
    const one = /^\/contexts\/([^/]+)(\/restart)?$/.exec(p);
    if (one && (req.method === "DELETE" || (one[2] && req.method === "POST"))) {
      const ctx = d.contexts.get(one[1]!);
      if (!ctx) return sendJson(res, 404, { code: 404, message: `context ${one[1]} not found` });
      if (ctx.kernel) sbx.killGroup(ctx.kernel.child.pid);
      delete ctx.kernel;
      if (req.method === "DELETE") d.contexts.delete(ctx.id);
      return sendEmpty(res, 204);
    }
    if (p === "/execute" && req.method === "POST") {
      const body = await readJson<{
        code: string;
        context_id?: string;
        language?: string;
        env_vars?: Record<string, string>;
      }>(req);
      const ctx = body.context_id ? d.contexts.get(body.context_id) : undefined;
      if (body.context_id && !ctx)
        return sendJson(res, 404, { code: 404, message: `context ${body.context_id} not found` });
      const language = ctx?.language ?? normaliseLanguage(body.language);
      if (!["python", "javascript", "typescript"].includes(language))
        return sendJson(res, 400, { code: 400, message: `unsupported language ${language}` });
      if (ctx) return this.executeInKernel(sbx, ctx, body.code, body.env_vars ?? {}, res);
      if (language !== "python")
        return this.execute(sbx, language as "javascript", body.code, body.env_vars ?? {}, res);
      // Python without a context runs in the default context: its state, like any context's,
      // lives on across cells.
      let target = d.defaults.get(language);
      if (!target) {
        target = { id: `default-${language}`, language, cwd: HOME };
        d.defaults.set(language, target);
      }
      return this.executeInKernel(sbx, target, body.code, body.env_vars ?? {}, res);
    }
    sendJson(res, 404, { code: 404, message: `no route ${p}` });
  }

  /** Runs a cell in the context's kernel (started on first use), streaming its NDJSON events. */
  private async executeInKernel(
    sbx: FakeSandbox,
    ctx: CodeContext,
    code: string,
    envs: Record<string, string>,
    res: ServerResponse,
  ): Promise<void> {
    const kernel = (ctx.kernel ??= await this.startKernel(sbx, ctx));
    res.writeHead(200, { "content-type": "application/x-ndjson" });
    res.flushHeaders();
    data(sbx).running.add(res);
    res.once("close", () => data(sbx).running.delete(res));
    const turn = kernel.queue.then(
      () =>
        new Promise<void>((resolve) => {
          const finish = () => {
            kernel.sink = null;
            res.end();
            resolve();
          };
          kernel.sink = (line) => {
            res.write(line + "\n");
            if ((JSON.parse(line) as { type?: string }).type === "end_of_execution") finish();
          };
          // A kernel killed mid-cell (restart, timeout, sandbox pause) ends the cell.
          void kernel.dead.then(() => {
            if (kernel.sink === null) return;
            res.write(
              JSON.stringify({
                type: "error",
                name: "DeadKernelError",
                value: "kernel died",
                traceback: "",
              }) +
                "\n" +
                JSON.stringify({ type: "end_of_execution" }) +
                "\n",
            );
            finish();
          });
          kernel.send(code, envs);
        }),
    );
    kernel.queue = turn;
    await turn;
  }

  private async startKernel(sbx: FakeSandbox, ctx: CodeContext): Promise<Kernel> {
    // Named like Jupyter's kernels, by a connection file carrying the kernel's id.
    const connection = `${HOME}/.fake-kernel/kernel-${ctx.id}.json`;
    return ctx.language === "python"
      ? this.startPythonKernel(sbx, ctx, connection)
      : this.startNodeKernel(sbx, ctx, connection);
  }

  private async startPythonKernel(
    sbx: FakeSandbox,
    ctx: CodeContext,
    connection: string,
  ): Promise<Kernel> {
    const dir = `${HOME}/.fake-kernel`;
    await writeFileAtomic(
      join(sbx.homeDir, ".fake-kernel", "ipykernel_launcher.py"),
      Buffer.from(KERNEL_SOURCE),
    );
    const child = await sbx.spawn(["python3", "-m", "ipykernel_launcher", "-f", connection], {
      cwd: ctx.cwd,
      env: { PYTHONPATH: dir },
    });
    const kernel = this.kernel(ctx, child, (code, envs) =>
      child.stdin?.write(JSON.stringify({ code, env_vars: envs }) + "\n"),
    );
    child.stderr?.on("data", () => undefined);
    createInterface({ input: child.stdout! }).on("line", (line) => kernel.sink?.(line));
    return kernel;
  }

  /**
   * sandboxd's persistent TypeScript kernel (cells in on fd 3, events out on fd 4, each cell's
   * output ended by a mark on stdout and stderr), its events turned into the code interpreter's.
   */
  private async startNodeKernel(
    sbx: FakeSandbox,
    ctx: CodeContext,
    connection: string,
  ): Promise<Kernel> {
    const child = await sbx.spawn(
      [
        "node",
        "--expose-internals",
        "--disable-warning=ExperimentalWarning",
        `${RUNNERS_MOUNT}/node_kernel.mjs`,
        "-f",
        connection,
      ],
      // Bare imports resolve from the home directory, where packages are installed.
      { cwd: ctx.cwd, env: { SANDPIT_CELL_DIR: HOME }, extraPipes: 2 },
    );
    child.stdin?.end();
    const emit = (o: unknown) => kernel.sink?.(JSON.stringify(o));
    let cell = { marks: 0, done: false, n: 0 };
    const settle = () => {
      if (cell.marks < 2 || !cell.done) return;
      emit({ type: "number_of_executions", execution_count: cell.n });
      emit({ type: "end_of_execution" });
    };
    const outputs = (["stdout", "stderr"] as const).map(
      (type) =>
        new MarkedStream(
          (text) => emit({ type, text, timestamp: new Date().toISOString() }),
          () => {
            cell.marks++;
            settle();
          },
        ),
    );
    child.stdout!.on("data", (b: Buffer) => outputs[0]!.feed(b));
    child.stderr!.on("data", (b: Buffer) => outputs[1]!.feed(b));
    const requests = child.stdio[3] as NodeJS.WritableStream;
    requests.on("error", () => undefined); // the kernel died: its exit ends the cell
    createInterface({ input: child.stdio[4] as NodeJS.ReadableStream }).on("line", (line) => {
      const e = JSON.parse(line) as {
        type: string;
        result?: { isMainResult: boolean; text?: string; json?: unknown };
        error?: { name: string; value: string; traceback: string };
      };
      if (e.type === "result" && e.result) {
        const { isMainResult, ...formats } = e.result;
        emit({ type: "result", ...formats, is_main_result: isMainResult });
      } else if (e.type === "error" && e.error) emit({ type: "error", ...e.error });
      else if (e.type === "done") {
        cell.done = true;
        settle();
      }
    });
    let executions = 0;
    const kernel = this.kernel(ctx, child, (code, envs) => {
      const mark = `\0fake-end-${randomBytes(8).toString("hex")}\0`;
      cell = { marks: 0, done: false, n: ++executions };
      for (const o of outputs) o.arm(mark);
      requests.write(JSON.stringify({ code, env: envs, mark }) + "\n");
    });
    return kernel;
  }

  private kernel(ctx: CodeContext, child: ChildProcess, send: Kernel["send"]): Kernel {
    const kernel: Kernel = {
      child,
      queue: Promise.resolve(),
      sink: null,
      dead: new Promise((resolve) => child.once("close", () => resolve())),
      send,
    };
    void kernel.dead.then(() => {
      if (ctx.kernel === kernel) delete ctx.kernel;
    });
    return kernel;
  }

  /**
   * Runs one JavaScript/TypeScript cell without a context with sandboxd's runner (read-only in
   * the image) and streams NDJSON as the E2B code interpreter server does: stdout/stderr lines,
   * then an error, then end_of_execution.
   */
  private async execute(
    sbx: FakeSandbox,
    language: "javascript" | "typescript",
    code: string,
    envs: Record<string, string>,
    res: ServerResponse,
  ): Promise<void> {
    const d = data(sbx);
    const n = ++d.executions;
    const cells = `${HOME}/.fake-kernel`;
    const id = `cell${n}-${randomBytes(4).toString("hex")}`;
    const codeFile = `${cells}/${id}.mts`;
    const errorFile = `${cells}/${id}.error.json`;
    await writeFileAtomic(
      join(sbx.homeDir, ".fake-kernel", posix.basename(codeFile)),
      Buffer.from(code),
    );
    // JavaScript is run as TypeScript (a superset once types are stripped).
    const argv = [
      "node",
      "--experimental-transform-types",
      "--disable-warning=ExperimentalWarning",
      "--import",
      `file://${RUNNERS_MOUNT}/node_preload.mjs`,
      codeFile,
    ];
    const env = { ...envs, SANDPIT_ERROR_FILE: errorFile, SANDPIT_CODE_FILE: codeFile };
    const child = await sbx.spawn(argv, { cwd: HOME, env });
    child.stdin?.end();
    res.writeHead(200, { "content-type": "application/x-ndjson" });
    res.flushHeaders();
    const line = (o: unknown) => res.write(JSON.stringify(o) + "\n");
    const ts = () => new Date().toISOString();
    child.stdout?.on("data", (c: Buffer) =>
      line({ type: "stdout", text: c.toString(), timestamp: ts() }),
    );
    child.stderr?.on("data", (c: Buffer) =>
      line({ type: "stderr", text: c.toString(), timestamp: ts() }),
    );
    child.once("close", async (code, signal) => {
      const errHost = join(sbx.homeDir, ".fake-kernel", `${id}.error.json`);
      const reported = await fs.readFile(errHost, "utf8").then(
        (t) => JSON.parse(t) as { name: string; message: string; traceback?: string },
        () => null,
      );
      await fs.rm(errHost, { force: true });
      await fs.rm(join(sbx.homeDir, ".fake-kernel", posix.basename(codeFile)), { force: true });
      if (reported)
        line({
          type: "error",
          name: reported.name,
          value: reported.message,
          traceback: reported.traceback ?? "",
        });
      else if (code !== 0) {
        // What IPython reports for sys.exit(n) (and a killed kernel process).
        line({
          type: "error",
          name: signal ? "KernelDied" : "SystemExit",
          value: signal ? `killed by ${signal}` : String(code),
          traceback: "",
        });
      }
      line({ type: "number_of_executions", execution_count: n });
      line({ type: "end_of_execution" });
      res.end();
    });
  }
}

/** One output stream of the Node kernel: text as it comes, up to the running cell's end mark. */
class MarkedStream {
  private mark: Buffer | null = null;
  private held = Buffer.alloc(0);
  private readonly decoder = new TextDecoder();
  private readonly onText: (text: string) => void;
  private readonly onMark: () => void;
  constructor(onText: (text: string) => void, onMark: () => void) {
    this.onText = onText;
    this.onMark = onMark;
  }

  arm(mark: string): void {
    this.mark = Buffer.from(mark);
  }

  feed(b: Buffer): void {
    let buf = Buffer.concat([this.held, b]);
    this.held = Buffer.alloc(0);
    const mark = this.mark;
    if (mark) {
      const at = buf.indexOf(mark);
      if (at >= 0) {
        this.send(buf.subarray(0, at));
        this.mark = null;
        this.onMark();
        return this.feed(buf.subarray(at + mark.length));
      }
      // Hold back what may be the start of the mark.
      let keep = Math.min(mark.length - 1, buf.length);
      while (keep > 0 && !mark.subarray(0, keep).equals(buf.subarray(buf.length - keep))) keep--;
      this.held = Buffer.from(buf.subarray(buf.length - keep));
      buf = buf.subarray(0, buf.length - keep);
    }
    this.send(buf);
  }

  private send(b: Uint8Array): void {
    const text = this.decoder.decode(b, { stream: true });
    if (text) this.onText(text);
  }
}

class RpcError extends Error {
  readonly code: string;
  readonly status: number;
  constructor(code: string, status: number, message: string) {
    super(message);
    this.code = code;
    this.status = status;
  }
}

/** envd's FilesystemEvent (JSON form) for what fs.watch (inotify) reports under `host`. */
function watchEvents(
  host: string,
  recursive: boolean,
  onEvent: (event: { name: string; type: string }) => void,
): FSWatcher {
  const known = new Set<string>();
  const watcher = watch(host, { recursive }, (kind, name) => {
    if (!name) return;
    const rel = name.toString();
    void fs.lstat(join(host, rel)).then(
      () => {
        // inotify says "rename" for a name that appeared; envd reports that as a create.
        const type =
          kind === "rename" && !known.has(rel) ? "EVENT_TYPE_CREATE" : "EVENT_TYPE_WRITE";
        known.add(rel);
        onEvent({ name: rel, type });
      },
      () => {
        known.delete(rel);
        onEvent({ name: rel, type: "EVENT_TYPE_REMOVE" });
      },
    );
  });
  // The watched directory may be removed under it (sandbox killed): that ends the watch.
  watcher.on("error", () => watcher.close());
  return watcher;
}

/** Signals as Go's ProcessState.String() names them in envd's end event ("signal: killed"). */
const GO_SIGNAL_TEXT: Record<string, string> = {
  SIGKILL: "killed",
  SIGTERM: "terminated",
  SIGINT: "interrupt",
  SIGHUP: "hangup",
  SIGQUIT: "quit",
  SIGUSR1: "user defined signal 1",
  SIGUSR2: "user defined signal 2",
};

function signalName(n: number): string {
  return Object.entries(osConstants.signals).find(([, v]) => v === n)?.[0] ?? `signal ${n}`;
}

function normaliseLanguage(l: string | undefined): string {
  if (!l || l === "py") return "python";
  if (l === "ts") return "typescript";
  if (l === "js") return "javascript";
  return l;
}

/**
 * envd's check of a signed /files URL: `v1_` + unpadded base64 of
 * SHA-256("<path>:<read|write>:<username>:<access token>[:<expiry>]"), not past its expiry.
 */
function signatureValid(url: URL, method: string | undefined, token: string): boolean {
  const q = url.searchParams;
  const expiry = q.get("signature_expiration");
  if (expiry !== null && Number(expiry) * 1000 < Date.now()) return false;
  const op = method === "GET" ? "read" : "write";
  const raw = `${q.get("path") ?? ""}:${op}:${q.get("username") ?? ""}:${token}${expiry !== null ? `:${expiry}` : ""}`;
  const want = `v1_${createHash("sha256").update(raw).digest("base64").replace(/=+$/, "")}`;
  const got = Buffer.from(q.get("signature") ?? "");
  return got.length === want.length && timingSafeEqual(got, Buffer.from(want));
}

function envelope(flags: number, obj: unknown): Buffer {
  const d = Buffer.from(JSON.stringify(obj));
  const h = Buffer.alloc(5);
  h.writeUInt8(flags, 0);
  h.writeUInt32BE(d.length, 1);
  return Buffer.concat([h, d]);
}

/** envd's EntryInfo in protobuf JSON form. */
function entryJson(e: Entry) {
  const type = {
    file: "FILE_TYPE_FILE",
    dir: "FILE_TYPE_DIRECTORY",
    symlink: "FILE_TYPE_SYMLINK",
    other: "FILE_TYPE_UNSPECIFIED",
  }[e.type];
  return {
    name: e.name,
    type,
    path: e.path,
    size: String(e.size),
    mode: e.mode,
    permissions: permissions(e),
    owner: "user",
    group: "user",
    modifiedTime: e.mtime.toISOString(),
  };
}

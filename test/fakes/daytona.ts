/**
 * A loopback Daytona: the control plane under /api (sandbox CRUD, start/stop/pause, preview
 * URLs) and the toolbox (daemon) under /toolbox/<sandboxId> (files, sessions, log streams over
 * WebSocket, process/execute), on one 127.0.0.1 port. Sandboxes carry `toolboxProxyUrl`
 * pointing back here, exactly the mechanism the SDK uses to find a sandbox's daemon.
 *
 * Everything runs for real in a FakeSandboxHost (bubblewrap, /mnt/user-data, /home/daytona).
 * Differences from Daytona worth knowing: each session command is its own `sh -c` process
 * (a real session shares one shell, so `cd` persists there; the provider does not rely on it),
 * and preview URLs are plain http://127.0.0.1:<port> because the fake shares the host network.
 */
import type { ChildProcess } from "node:child_process";
import { randomBytes, randomUUID } from "node:crypto";
import * as fs from "node:fs/promises";
import { dirname, join, posix } from "node:path";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Socket } from "node:net";
import {
  FakeServer,
  parseMultipart,
  readBody,
  readJson,
  sendEmpty,
  sendJson,
  ServerWebSocket,
} from "./http.ts";
import { FakeDaytonaPtys } from "./daytona-pty.ts";
import { listEntries, permissions, statEntry, writeFileAtomic, type Entry } from "./files.ts";
import { FakeSandboxHost, userPipEnv, type FakeSandbox } from "./sandbox-host.ts";

export const DAYTONA_FAKE_API_KEY = "dtn_fake_key";
const HOME = "/home/daytona";
const STDOUT = Buffer.from([1, 1, 1]);
const STDERR = Buffer.from([2, 2, 2]);

interface Command {
  id: string;
  command: string;
  exitCode?: number;
  /** Interleaved output, each chunk tagged, for the log stream. */
  chunks: { stream: "stdout" | "stderr"; data: Buffer }[];
  child: ChildProcess | null;
  /** Settles once the process exists (or could not be started). */
  started: Promise<void>;
  done: Promise<void>;
  listeners: Set<() => void>;
}

interface DaytonaData {
  name: string;
  labels: Record<string, string>;
  target: string;
  createdAt: string;
  dayState: string;
  sessions: Map<string, Map<string, Command>>;
  snapshot?: string | undefined;
  autoStopInterval: number;
  /** Minutes from `ttlFrom` after which Daytona destroys the sandbox; 0: none. */
  ttlMinutes: number;
  ttlFrom: number;
  networkBlockAll: boolean;
  networkAllowList?: string | undefined;
  ptys: FakeDaytonaPtys;
}

const data = (s: FakeSandbox) => s.data as unknown as DaytonaData;

export class FakeDaytona {
  readonly host = new FakeSandboxHost({
    home: HOME,
    imageEnv: userPipEnv,
  });
  readonly server: FakeServer;
  url = "";
  apiKey = DAYTONA_FAKE_API_KEY;
  /** Sandboxes that were deleted (GET answers 404, as Daytona does once they are gone). */
  private readonly destroyed = new Set<string>();

  constructor() {
    this.server = new FakeServer(
      (req, res, url) => this.route(req, res, url),
      (req, socket, url) => this.upgrade(req, socket, url),
    );
  }

  async start(): Promise<string> {
    this.url = await this.server.listen();
    return this.url;
  }

  /** The apiUrl to give the SDK. */
  get apiUrl(): string {
    return `${this.url}/api`;
  }

  async close(): Promise<void> {
    await this.server.close();
    await this.host.close();
  }

  private authorised(req: IncomingMessage): boolean {
    return req.headers.authorization === `Bearer ${this.apiKey}`;
  }

  private async route(req: IncomingMessage, res: ServerResponse, url: URL): Promise<void> {
    if (!this.authorised(req)) return error(res, 401, "UNAUTHORIZED", "Invalid credentials");
    if (url.pathname.startsWith("/api/")) return this.api(req, res, url);
    const t = /^\/toolbox\/([^/]+)(\/.*)$/.exec(url.pathname);
    if (t) return this.toolbox(t[1]!, t[2]!, req, res, url);
    error(res, 404, "NOT_FOUND", `no route ${req.method} ${url.pathname}`);
  }

  // ---- control plane ------------------------------------------------------------------------

  private dto(sbx: FakeSandbox) {
    const d = data(sbx);
    return {
      id: sbx.id,
      organizationId: "org-fake",
      name: d.name,
      user: "daytona",
      env: sbx.env,
      labels: d.labels,
      public: false,
      networkBlockAll: d.networkBlockAll,
      ...(d.networkAllowList ? { networkAllowList: d.networkAllowList } : {}),
      ...(d.snapshot ? { snapshot: d.snapshot } : {}),
      target: d.target,
      cpu: 1,
      gpu: 0,
      memory: 1,
      disk: 3,
      state: d.dayState,
      desiredState: d.dayState,
      createdAt: d.createdAt,
      updatedAt: new Date().toISOString(),
      autoStopInterval: d.autoStopInterval,
      autoArchiveInterval: 10080,
      autoDeleteInterval: -1,
      toolboxProxyUrl: `${this.url}/toolbox`,
    };
  }

  private async api(req: IncomingMessage, res: ServerResponse, url: URL): Promise<void> {
    const p = url.pathname.slice("/api".length);
    if (p.startsWith("/socket.io"))
      return error(res, 404, "NOT_FOUND", "events are not served by the fake");
    if (p === "/sandbox" && req.method === "POST") return this.create(req, res);
    if (p === "/sandbox" && req.method === "GET") return this.list(res, url);
    const m =
      /^\/sandbox\/([^/]+)(?:\/(start|stop|pause|toolbox-proxy-url)|\/ports\/(\d+)\/preview-url|\/ttl\/([^/]+))?$/.exec(
        p,
      );
    if (!m) return error(res, 404, "NOT_FOUND", `no route ${req.method} ${p}`);
    const [, id, action, port, ttl] = m;
    const sbx = this.host.get(id!) ?? this.host.all().find((s) => data(s).name === id);
    if (!sbx) return error(res, 404, "NOT_FOUND", `Sandbox with ID or name ${id} not found`);
    await readBody(req);
    const d = data(sbx);
    if (port)
      return sendJson(res, 200, {
        sandboxId: sbx.id,
        url: `http://127.0.0.1:${port}`,
        token: randomBytes(8).toString("hex"),
      });
    if (ttl !== undefined && req.method === "POST") {
      // Daytona: minutes from now; 0 turns the TTL off.
      if (!/^\d+$/.test(ttl)) return error(res, 400, "BAD_REQUEST", "ttlMinutes: a whole number");
      d.ttlMinutes = Number(ttl);
      d.ttlFrom = Date.now();
      return sendEmpty(res, 200);
    }
    if (req.method === "GET" && action === "toolbox-proxy-url")
      return sendJson(res, 200, { url: `${this.url}/toolbox` });
    if (req.method === "GET" && !action) return sendJson(res, 200, this.dto(sbx));
    if (req.method === "DELETE" && !action) {
      d.dayState = "destroyed";
      const body = this.dto(sbx);
      this.destroyed.add(sbx.id);
      await this.host.kill(sbx);
      return sendJson(res, 200, body);
    }
    if (req.method === "POST" && action === "start") {
      if (d.dayState === "started")
        return error(res, 409, "CONFLICT", "Sandbox is already started");
      sbx.state = "running";
      d.dayState = "started";
      return sendJson(res, 200, this.dto(sbx));
    }
    if (req.method === "POST" && (action === "stop" || action === "pause")) {
      if (d.dayState !== "started")
        return error(res, 409, "CONFLICT", `Sandbox is not started (state ${d.dayState})`);
      // The sandbox's container (or VM) stops: every process in it ends, the daemon's with
      // them, and the daemon that starts with it again knows no session.
      this.host.pause(sbx);
      d.sessions.clear();
      d.ptys.clear();
      d.dayState = action === "stop" ? "stopped" : "paused";
      return sendJson(res, 200, this.dto(sbx));
    }
    error(res, 405, "METHOD_NOT_ALLOWED", "method not allowed");
  }

  private async create(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const body = await readJson<{
      name?: string;
      env?: Record<string, string>;
      labels?: Record<string, string>;
      target?: string;
      snapshot?: string;
      autoStopInterval?: number;
      ttlMinutes?: number;
      networkBlockAll?: boolean;
      networkAllowList?: string;
    }>(req);
    const id = randomUUID();
    const sbx = await this.host.create(id, body.env ?? {});
    const d: DaytonaData = {
      name: body.name ?? id,
      labels: body.labels ?? {},
      target: body.target ?? "us",
      createdAt: new Date().toISOString(),
      dayState: "started",
      sessions: new Map(),
      snapshot: body.snapshot,
      autoStopInterval: body.autoStopInterval ?? 15,
      ttlMinutes: body.ttlMinutes ?? 0,
      ttlFrom: Date.now(),
      networkBlockAll: body.networkBlockAll ?? false,
      networkAllowList: body.networkAllowList,
      ptys: new FakeDaytonaPtys(HOME, daemonError),
    };
    Object.assign(sbx.data, d);
    sendJson(res, 200, this.dto(sbx));
  }

  private list(res: ServerResponse, url: URL): void {
    const labels = JSON.parse(url.searchParams.get("labels") ?? "{}") as Record<string, string>;
    const items = this.host
      .all()
      .filter((s) => Object.entries(labels).every(([k, v]) => data(s).labels[k] === v))
      .map((s) => this.dto(s));
    sendJson(res, 200, { items, total: items.length, page: 1, totalPages: 1, nextCursor: null });
  }

  // ---- toolbox ------------------------------------------------------------------------------

  private sandboxFor(res: ServerResponse, id: string): FakeSandbox | null {
    const sbx = this.host.get(id);
    if (!sbx) {
      error(res, 404, "NOT_FOUND", `sandbox ${id} not found`);
      return null;
    }
    if (sbx.state !== "running") {
      error(res, 409, "CONFLICT", `sandbox ${id} is not started`);
      return null;
    }
    return sbx;
  }

  private async toolbox(
    id: string,
    p: string,
    req: IncomingMessage,
    res: ServerResponse,
    url: URL,
  ): Promise<void> {
    const sbx = this.sandboxFor(res, id);
    if (!sbx) return;
    const q = (k: string) => url.searchParams.get(k) ?? "";
    if (p.startsWith("/process/pty") && (await data(sbx).ptys.route(p, req, res))) return;
    if (p === "/files/bulk-upload" && req.method === "POST") return this.upload(sbx, req, res);
    if (p === "/files/bulk-download" && req.method === "POST") return this.download(sbx, req, res);
    if (p === "/files" && req.method === "GET") {
      const host = await this.path(sbx, res, q("path"));
      if (!host) return;
      const e = await statEntry(sbx, host);
      if (!e) return daemonError(res, 404, "FILE_NOT_FOUND", `directory not found: ${q("path")}`);
      if (e.type !== "dir")
        return daemonError(res, 400, "BAD_REQUEST", `not a directory: ${q("path")}`);
      const depth = Number(q("depth") || 1);
      if (!Number.isInteger(depth) || depth < 1)
        return daemonError(res, 400, "BAD_REQUEST", "depth must be >= 1");
      const out: Entry[] = [];
      const walk = async (dir: string, level: number) => {
        for (const entry of await listEntries(sbx, dir)) {
          out.push(entry);
          if (entry.type === "dir" && level < depth) await walk(join(dir, entry.name), level + 1);
        }
      };
      await walk(host, 1);
      return sendJson(res, 200, out.map(fileInfo));
    }
    if (p === "/files/move" && req.method === "POST") {
      const from = await this.path(sbx, res, q("source"));
      if (!from) return;
      const to = await this.path(sbx, res, q("destination"));
      if (!to) return;
      if (!(await statEntry(sbx, from)))
        return daemonError(res, 404, "FILE_NOT_FOUND", `file not found: ${q("source")}`);
      // os.Rename refuses a directory moved into itself (EINVAL): a 400, before anything is made.
      if (to.startsWith(`${from}/`))
        return daemonError(res, 400, "BAD_REQUEST", `cannot move ${q("source")} into itself`);
      await fs.mkdir(dirname(to), { recursive: true });
      const failed = await fs.rename(from, to).then(
        () => null,
        (err: NodeJS.ErrnoException) => err.code ?? err.message,
      );
      if (failed) return daemonError(res, 400, "BAD_REQUEST", `cannot move: ${failed}`);
      res.writeHead(200, { "content-length": "0" });
      return void res.end();
    }
    if (p === "/files/search" && req.method === "GET") {
      // The daemon walks the tree and matches each entry's name against the pattern.
      const host = await this.path(sbx, res, q("path"));
      if (!host) return;
      if (!(await statEntry(sbx, host)))
        return daemonError(res, 404, "FILE_NOT_FOUND", `directory not found: ${q("path")}`);
      const files: string[] = [];
      const walk = async (dir: string) => {
        for (const entry of await listEntries(sbx, dir)) {
          if (posix.matchesGlob(entry.name, q("pattern"))) files.push(entry.path);
          if (entry.type === "dir") await walk(join(dir, entry.name));
        }
      };
      await walk(host);
      return sendJson(res, 200, { files });
    }
    if (p === "/files/info" && req.method === "GET") {
      const host = await this.path(sbx, res, q("path"));
      if (!host) return;
      const e = await statEntry(sbx, host);
      if (!e) return daemonError(res, 404, "FILE_NOT_FOUND", `file not found: ${q("path")}`);
      return sendJson(res, 200, fileInfo(e));
    }
    if (p === "/files/folder" && req.method === "POST") {
      const host = await this.path(sbx, res, q("path"));
      if (!host) return;
      await fs.mkdir(host, { recursive: true, mode: parseInt(q("mode") || "755", 8) });
      res.writeHead(201, { "content-length": "0" });
      return void res.end();
    }
    if (p === "/files" && req.method === "DELETE") {
      const host = await this.path(sbx, res, q("path"));
      if (!host) return;
      const e = await statEntry(sbx, host);
      if (!e) return daemonError(res, 404, "FILE_NOT_FOUND", `file not found: ${q("path")}`);
      if (e.type === "dir" && q("recursive") !== "true")
        return daemonError(
          res,
          400,
          "BAD_REQUEST",
          "cannot delete directory without recursive flag",
        );
      await fs.rm(host, { recursive: true, force: true });
      res.writeHead(204);
      return void res.end();
    }
    if (p === "/process/execute" && req.method === "POST") {
      const body = await readJson<{
        command: string;
        cwd?: string;
        envs?: Record<string, string>;
        timeout?: number;
      }>(req);
      const cmd = this.spawnCommand(sbx, body.command, body.cwd ?? HOME, body.envs);
      const done = await Promise.race([
        cmd.done.then(() => true),
        body.timeout
          ? sleepFor(body.timeout * 1000).then(() => false)
          : new Promise<boolean>(() => undefined),
      ]);
      if (!done) {
        sbx.killGroup(cmd.child?.pid);
        return daemonError(res, 408, "REQUEST_TIMEOUT", "command execution timeout");
      }
      return sendJson(res, 200, {
        exitCode: cmd.exitCode,
        result: Buffer.concat(cmd.chunks.map((c) => c.data)).toString(),
      });
    }
    if (p === "/process/session" && req.method === "GET")
      return sendJson(
        res,
        200,
        [...data(sbx).sessions].map(([sessionId, cmds]) => sessionJson(sessionId, cmds)),
      );
    if (p === "/process/session" && req.method === "POST") {
      const body = await readJson<{ sessionId: string }>(req);
      const d = data(sbx);
      if (d.sessions.has(body.sessionId))
        return daemonError(res, 409, "CONFLICT", `session ${body.sessionId} already exists`);
      d.sessions.set(body.sessionId, new Map());
      res.writeHead(201, { "content-length": "0" });
      return void res.end();
    }
    const s = /^\/process\/session\/([^/]+)(?:\/(exec)|\/command\/([^/]+)(\/logs|\/input)?)?$/.exec(
      p,
    );
    if (s) {
      const [, sid, exec, cid, sub] = s;
      const logs = sub === "/logs";
      const session = data(sbx).sessions.get(sid!);
      if (!session) return daemonError(res, 404, "NOT_FOUND", `session ${sid} not found`);
      if (req.method === "GET" && !exec && !cid)
        return sendJson(res, 200, sessionJson(sid!, session));
      if (req.method === "DELETE" && !exec && !cid) {
        // The daemon kills the session's shell: a command still running dies with it, while
        // what a finished command left in the background (a server) keeps running.
        for (const c of session.values()) if (c.exitCode === undefined) sbx.killGroup(c.child?.pid);
        data(sbx).sessions.delete(sid!);
        res.writeHead(204);
        return void res.end();
      }
      if (exec && req.method === "POST") {
        const body = await readJson<{ command: string; runAsync?: boolean; async?: boolean }>(req);
        const cmd = this.spawnCommand(sbx, body.command, HOME, undefined, true);
        session.set(cmd.id, cmd);
        if (body.runAsync || body.async) return sendJson(res, 202, { cmdId: cmd.id });
        await cmd.done;
        const part = (k: "stdout" | "stderr") =>
          Buffer.concat(cmd.chunks.filter((c) => c.stream === k).map((c) => c.data)).toString();
        return sendJson(res, 200, {
          cmdId: cmd.id,
          output: part("stdout") + part("stderr"),
          stdout: part("stdout"),
          stderr: part("stderr"),
          exitCode: cmd.exitCode,
        });
      }
      const cmd = cid ? session.get(cid) : undefined;
      if (cid && !cmd) return daemonError(res, 404, "NOT_FOUND", `command ${cid} not found`);
      if (cmd && sub === "/input" && req.method === "POST") {
        const body = await readJson<{ data?: string }>(req);
        if (cmd.exitCode !== undefined)
          return daemonError(res, 409, "CONFLICT", `command ${cid} has exited`);
        await cmd.started;
        cmd.child?.stdin?.write(body.data ?? "");
        res.writeHead(200, { "content-length": "0" });
        return void res.end();
      }
      if (cmd && !logs && req.method === "GET") {
        return sendJson(res, 200, {
          id: cmd.id,
          command: cmd.command,
          ...(cmd.exitCode !== undefined ? { exitCode: cmd.exitCode } : {}),
        });
      }
      if (cmd && logs && req.method === "GET") {
        // The log so far, at once (the daemon reads the command's log file; following it is the
        // WebSocket below).
        const part = (k: "stdout" | "stderr") =>
          Buffer.concat(cmd.chunks.filter((c) => c.stream === k).map((c) => c.data)).toString();
        return sendJson(res, 200, {
          output: part("stdout") + part("stderr"),
          stdout: part("stdout"),
          stderr: part("stderr"),
        });
      }
    }
    daemonError(res, 404, "NOT_FOUND", `no route ${req.method} ${p}`);
  }

  /**
   * WebSockets: terminals (see daytona-pty.ts), and the followed log stream of a session
   * command, stdout/stderr demuxed by prefix.
   */
  private upgrade(req: IncomingMessage, socket: Socket, url: URL): void {
    const t = /^\/toolbox\/([^/]+)(\/process\/pty\/.*)$/.exec(url.pathname);
    const running = t ? this.host.get(t[1]!) : undefined;
    if (t && this.authorised(req) && running?.state === "running") {
      if (data(running).ptys.upgrade(running, t[2]!, url, req, socket)) return;
    }
    const m = /^\/toolbox\/([^/]+)\/process\/session\/([^/]+)\/command\/([^/]+)\/logs$/.exec(
      url.pathname,
    );
    const sbx = m ? this.host.get(m[1]!) : undefined;
    const cmd = sbx ? data(sbx).sessions.get(m![2]!)?.get(m![3]!) : undefined;
    if (!this.authorised(req) || !cmd) {
      socket.end("HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n");
      return;
    }
    const ws = new ServerWebSocket(req, socket);
    let sent = 0;
    const pump = () => {
      while (sent < cmd.chunks.length) {
        const c = cmd.chunks[sent++]!;
        ws.send(Buffer.concat([c.stream === "stdout" ? STDOUT : STDERR, c.data]));
      }
    };
    cmd.listeners.add(pump);
    ws.onClose = () => cmd.listeners.delete(pump);
    pump();
    void cmd.done.then(() => {
      pump();
      cmd.listeners.delete(pump);
      ws.close();
    });
  }

  private spawnCommand(
    sbx: FakeSandbox,
    command: string,
    cwd: string,
    envs: Record<string, string> | undefined,
    /** Session commands keep stdin open, for the input call. */
    keepStdin = false,
  ): Command {
    const cmd: Command = {
      id: randomUUID(),
      command,
      chunks: [],
      child: null,
      started: Promise.resolve(),
      done: Promise.resolve(),
      listeners: new Set(),
    };
    const notify = () => cmd.listeners.forEach((l) => l());
    let started!: () => void;
    cmd.started = new Promise((resolve) => (started = resolve));
    cmd.done = (async () => {
      const child = await sbx
        .spawn(["/bin/sh", "-c", command], { cwd, env: envs })
        .catch((err: unknown) => {
          started();
          throw err;
        });
      cmd.child = child;
      started();
      if (!keepStdin) child.stdin?.end();
      child.stdout?.on("data", (c: Buffer) => {
        cmd.chunks.push({ stream: "stdout", data: c });
        notify();
      });
      child.stderr?.on("data", (c: Buffer) => {
        cmd.chunks.push({ stream: "stderr", data: c });
        notify();
      });
      await new Promise<void>((resolve) =>
        child.once("close", (code, signal) => {
          cmd.exitCode = code ?? (signal ? 137 : -1);
          resolve();
        }),
      );
    })().catch((err: unknown) => {
      cmd.chunks.push({ stream: "stderr", data: Buffer.from(String(err)) });
      cmd.exitCode = -1;
    });
    return cmd;
  }

  private async path(sbx: FakeSandbox, res: ServerResponse, p: string): Promise<string | null> {
    const host = await sbx.hostPath(p);
    if (!host) daemonError(res, 403, "FORBIDDEN", `access to ${p} is not allowed`);
    return host;
  }

  private async upload(sbx: FakeSandbox, req: IncomingMessage, res: ServerResponse): Promise<void> {
    const parts = parseMultipart(await readBody(req), req.headers["content-type"] ?? "");
    const paths = new Map<string, string>();
    for (const part of parts) {
      const m = /^files\[(\d+)\]\.path$/.exec(part.name);
      if (m) paths.set(m[1]!, part.data.toString("utf8"));
    }
    for (const part of parts) {
      const m = /^files\[(\d+)\]\.file$/.exec(part.name);
      if (!m) continue;
      const target = paths.get(m[1]!) ?? part.filename ?? "";
      const host = await this.path(sbx, res, target);
      if (!host) return;
      if ((await fs.stat(host).catch(() => null))?.isDirectory())
        return daemonError(res, 400, "BAD_REQUEST", `${target} is a directory`);
      await writeFileAtomic(host, part.data);
    }
    res.writeHead(200, { "content-length": "0" });
    res.end();
  }

  /** A multipart response: one `file` part per path, or an `error` part with JSON. */
  private async download(
    sbx: FakeSandbox,
    req: IncomingMessage,
    res: ServerResponse,
  ): Promise<void> {
    const { paths } = await readJson<{ paths: string[] }>(req);
    const boundary = `DAYTONA-FAKE-${randomBytes(8).toString("hex")}`;
    const out: Buffer[] = [];
    for (const p of paths) {
      const host = await sbx.hostPath(p);
      const st = host ? await fs.stat(host).catch(() => null) : null;
      if (!host || !st || st.isDirectory()) {
        const body = Buffer.from(
          JSON.stringify({
            statusCode: 404,
            message: `file not found: ${p}`,
            code: "FILE_NOT_FOUND",
            source: "DAYTONA_DAEMON",
          }),
        );
        out.push(
          Buffer.from(
            `--${boundary}\r\nContent-Disposition: form-data; name="error"; filename="${p}"\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n`,
          ),
          body,
          Buffer.from("\r\n"),
        );
        continue;
      }
      const content = await fs.readFile(host);
      out.push(
        Buffer.from(
          `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="${p}"\r\nContent-Type: application/octet-stream\r\nContent-Length: ${content.length}\r\n\r\n`,
        ),
        content,
        Buffer.from("\r\n"),
      );
    }
    out.push(Buffer.from(`--${boundary}--\r\n`));
    const body = Buffer.concat(out);
    res.writeHead(200, {
      "content-type": `multipart/form-data; boundary=${boundary}`,
      "content-length": String(body.length),
    });
    res.end(body);
  }
}

function sleepFor(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

function error(res: ServerResponse, status: number, code: string, message: string): void {
  sendJson(res, status, {
    statusCode: status,
    message,
    code,
    source: "DAYTONA_API",
    timestamp: new Date().toISOString(),
  });
}

/** The toolbox's Session: its id and commands (exit codes once they ended). */
function sessionJson(sessionId: string, cmds: Map<string, Command>) {
  return {
    sessionId,
    commands: [...cmds.values()].map((c) => ({
      id: c.id,
      command: c.command,
      ...(c.exitCode !== undefined ? { exitCode: c.exitCode } : {}),
    })),
  };
}

function daemonError(res: ServerResponse, status: number, code: string, message: string): void {
  sendJson(res, status, {
    statusCode: status,
    message,
    code,
    source: "DAYTONA_DAEMON",
    timestamp: new Date().toISOString(),
  });
}

function fileInfo(e: Entry) {
  return {
    name: e.name,
    path: e.path,
    isDir: e.type === "dir",
    size: e.size,
    mode: permissions(e),
    permissions: `0${(e.mode & 0o777).toString(8)}`,
    owner: "daytona",
    group: "daytona",
    modTime: e.mtime.toISOString(),
    modifiedAt: e.mtime.toISOString(),
  };
}

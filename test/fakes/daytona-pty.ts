/**
 * The Daytona daemon's terminals, for the Daytona fake: `/process/pty` (list), `/process/pty/{id}`
 * (info, DELETE = kill), `/process/pty/{id}/resize`, and two WebSockets, `create-connect`
 * (id, cols, rows and cwd in the query; envs as a base64url JSON subprotocol token) and
 * `{id}/connect`. As the daemon does: each terminal is the user's shell (`bash -i -l`) on a real
 * pty; output goes to the clients attached at the moment (nothing is kept for a later one);
 * a client that offered `X-Daytona-Pty-Exit-Control` gets `{type: "control", status:
 * "connected"}` on attach and `{status: "exited", exitCode, exitReason}` before the close
 * frame, whose reason is `{exitCode, exitReason}` as JSON; DELETE kills the shell alone (its
 * jobs live on) and reports 137; an exited terminal is forgotten.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Socket } from "node:net";
import type { IPty } from "node-pty";
import { readJson, sendJson, ServerWebSocket } from "./http.ts";
import type { FakeSandbox } from "./sandbox-host.ts";

const EXIT_CONTROL = "X-Daytona-Pty-Exit-Control";
const ENVS_PREFIX = "X-Daytona-Pty-Envs~";
const MAX_SIZE = 1000;

interface Client {
  ws: ServerWebSocket;
  exitControl: boolean;
}

interface Terminal {
  info: {
    id: string;
    cwd: string;
    envs: Record<string, string>;
    cols: number;
    rows: number;
    createdAt: string;
    active: boolean;
    lazyStart: boolean;
  };
  term: IPty;
  clients: Set<Client>;
}

type Fail = (res: ServerResponse, status: number, code: string, message: string) => void;

export class FakeDaytonaPtys {
  private readonly terminals = new Map<string, Terminal>();
  private readonly home: string;
  private readonly fail: Fail;

  constructor(home: string, fail: Fail) {
    this.home = home;
    this.fail = fail;
  }

  /** The HTTP routes; false when `p` is none of them. */
  async route(p: string, req: IncomingMessage, res: ServerResponse): Promise<boolean> {
    if (p === "/process/pty" && req.method === "GET") {
      sendJson(res, 200, { sessions: [...this.terminals.values()].map((t) => t.info) });
      return true;
    }
    const m = /^\/process\/pty\/([^/]+)(\/resize)?$/.exec(p);
    if (!m || m[1] === "create-connect") return false;
    const t = this.terminals.get(m[1]!);
    if (!t) {
      this.fail(res, 404, "NOT_FOUND", `PTY session ${m[1]} not found`);
      return true;
    }
    if (m[2] && req.method === "POST") {
      const { cols, rows } = await readJson<{ cols: number; rows: number }>(req);
      if (!(cols > 0 && rows > 0 && cols <= MAX_SIZE && rows <= MAX_SIZE)) {
        this.fail(res, 400, "BAD_REQUEST", `cols and rows must be 1 to ${MAX_SIZE}`);
        return true;
      }
      t.term.resize(cols, rows);
      Object.assign(t.info, { cols, rows });
      sendJson(res, 200, t.info);
    } else if (!m[2] && req.method === "GET") sendJson(res, 200, t.info);
    else if (!m[2] && req.method === "DELETE") {
      // The daemon kills the shell process only, and tells the clients 128 + SIGKILL.
      this.terminals.delete(t.info.id);
      t.info.active = false;
      t.term.kill("SIGKILL");
      this.finish(t, 137, false);
      sendJson(res, 200, { message: "PTY session deleted" });
    } else return false;
    return true;
  }

  /** The WebSocket routes (`p` below the sandbox's toolbox); false when `p` is none of them. */
  upgrade(sbx: FakeSandbox, p: string, url: URL, req: IncomingMessage, socket: Socket): boolean {
    const refuse = (status: string) => {
      socket.end(`HTTP/1.1 ${status}\r\ncontent-length: 0\r\n\r\n`);
      return true;
    };
    const offered = (req.headers["sec-websocket-protocol"] ?? "").split(",").map((s) => s.trim());
    const client = (ws: ServerWebSocket): Client => ({
      ws,
      exitControl: offered.includes(EXIT_CONTROL),
    });
    if (p === "/process/pty/create-connect") {
      const id = url.searchParams.get("id") ?? "";
      if (!id) return refuse("400 Bad Request");
      if (this.terminals.has(id)) return refuse("409 Conflict");
      const token = offered.find((s) => s.startsWith(ENVS_PREFIX));
      let envs: Record<string, string> = {};
      try {
        if (token)
          envs = JSON.parse(
            Buffer.from(token.slice(ENVS_PREFIX.length), "base64url").toString("utf8"),
          ) as Record<string, string>;
      } catch {
        return refuse("400 Bad Request");
      }
      const cols = Number(url.searchParams.get("cols") ?? 80);
      const rows = Number(url.searchParams.get("rows") ?? 24);
      if (!(cols > 0 && rows > 0 && cols <= MAX_SIZE && rows <= MAX_SIZE))
        return refuse("400 Bad Request");
      const ws = new ServerWebSocket(req, socket, EXIT_CONTROL);
      void this.create(sbx, id, url.searchParams.get("cwd") || this.home, envs, cols, rows).then(
        (t) => this.attach(t, client(ws)),
        (err: unknown) => {
          ws.send(
            Buffer.from(JSON.stringify({ type: "control", status: "error", error: String(err) })),
            false,
          );
          ws.close(1011);
        },
      );
      return true;
    }
    const m = /^\/process\/pty\/([^/]+)\/connect$/.exec(p);
    if (!m) return false;
    const t = this.terminals.get(m[1]!);
    if (!t) return refuse("404 Not Found");
    this.attach(t, client(new ServerWebSocket(req, socket, EXIT_CONTROL)));
    return true;
  }

  /** The sandbox stopped: its terminals died with it, and the daemon forgets them. */
  clear(): void {
    for (const t of this.terminals.values()) for (const c of t.clients) c.ws.destroy();
    this.terminals.clear();
  }

  private async create(
    sbx: FakeSandbox,
    id: string,
    cwd: string,
    envs: Record<string, string>,
    cols: number,
    rows: number,
  ): Promise<Terminal> {
    const term = await sbx.spawnPty(["bash", "-i", "-l"], { cwd, env: envs, cols, rows });
    const t: Terminal = {
      info: {
        id,
        cwd,
        envs,
        cols,
        rows,
        createdAt: new Date().toISOString(),
        active: true,
        lazyStart: false,
      },
      term,
      clients: new Set(),
    };
    this.terminals.set(id, t);
    term.onData((d: string | Buffer) => {
      for (const c of t.clients) c.ws.send(Buffer.from(d));
    });
    // As Go reports it: exit code -1 for a process a signal ended (DELETE reported 137 already).
    term.onExit(({ exitCode, signal }) => {
      if (this.terminals.get(id) !== t) return;
      this.terminals.delete(id);
      t.info.active = false;
      // Output node-pty still holds comes before the exit, as the daemon drains it first.
      setTimeout(() => this.finish(t, signal ? -1 : exitCode, true), 50);
    });
    return t;
  }

  private attach(t: Terminal, c: Client): void {
    t.clients.add(c);
    c.ws.onClose = () => t.clients.delete(c);
    c.ws.onMessage = (data) => t.info.active && t.term.write(data.toString("utf8"));
    c.ws.send(Buffer.from(JSON.stringify({ type: "control", status: "connected" })), false);
  }

  /** Ends the clients: a graceful exit sends the exit control first, a kill only the close. */
  private finish(t: Terminal, exitCode: number, graceful: boolean): void {
    const reason = exitReason(exitCode);
    const body = { exitCode, ...(reason ? { exitReason: reason } : {}) };
    for (const c of t.clients) {
      if (graceful && c.exitControl)
        c.ws.send(
          Buffer.from(JSON.stringify({ type: "control", status: "exited", ...body })),
          false,
        );
      c.ws.close(exitCode === 0 ? 1000 : 1011, JSON.stringify(body));
    }
    t.clients.clear();
  }
}

function exitReason(code: number): string | undefined {
  if (code === 0) return undefined;
  if (code === 130) return "Ctrl+C";
  if (code === 137) return "SIGKILL";
  if (code === 143) return "SIGTERM";
  if (code > 128) return `signal ${code - 128}`;
  return "non-zero exit";
}

/**
 * Small HTTP pieces shared by the service fakes: a loopback server with fault injection,
 * body and multipart parsing, and just enough of RFC 6455 (server side) for Daytona's log
 * streams. Written here rather than borrowed so the fakes depend on nothing but Node.
 */
import { createHash } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo, Socket } from "node:net";

/** What a test can make the next matching request(s) do. */
export interface Fault {
  method?: string;
  /** Matched against the request path (without the query). */
  path: RegExp;
  /** Answer with this status and JSON body. */
  status?: number;
  body?: unknown;
  headers?: Record<string, string>;
  /** Wait this long first (before answering, or before the normal handler when no status). */
  delayMs?: number;
  /** Destroy the connection: after `dropAfterBytes` of the normal response, or at once. */
  drop?: boolean;
  dropAfterBytes?: number;
  /** Never answer (the client's own deadline must fire). */
  hang?: boolean;
  /** How many requests this applies to (default 1). */
  times?: number;
}

export type Handler = (req: IncomingMessage, res: ServerResponse, url: URL) => Promise<void>;
export type UpgradeHandler = (req: IncomingMessage, socket: Socket, url: URL) => void;

export class FakeServer {
  readonly server: Server;
  readonly requests: { method: string; path: string; headers: IncomingMessage["headers"] }[] = [];
  private faults: (Fault & { left: number })[] = [];
  private readonly sockets = new Set<Socket>();
  port = 0;

  constructor(handler: Handler, upgrade?: UpgradeHandler) {
    this.server = createServer((req, res) => {
      const url = new URL(req.url ?? "/", "http://127.0.0.1");
      this.requests.push({ method: req.method ?? "GET", path: url.pathname, headers: req.headers });
      void this.dispatch(handler, req, res, url);
    });
    this.server.requestTimeout = 0;
    this.server.on("connection", (s) => {
      this.sockets.add(s);
      s.once("close", () => this.sockets.delete(s));
    });
    if (upgrade) {
      this.server.on("upgrade", (req: IncomingMessage, socket: Socket) => {
        const url = new URL(req.url ?? "/", "http://127.0.0.1");
        this.requests.push({ method: "WS", path: url.pathname, headers: req.headers });
        const fault = this.takeFault("WS", url.pathname);
        if (fault?.drop || fault?.status) {
          socket.destroy();
          return;
        }
        upgrade(req, socket, url);
      });
    }
  }

  async listen(): Promise<string> {
    await new Promise<void>((resolve) => this.server.listen(0, "127.0.0.1", () => resolve()));
    this.port = (this.server.address() as AddressInfo).port;
    return `http://127.0.0.1:${this.port}`;
  }

  async close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  /** Makes the next request(s) matching `fault` misbehave. */
  inject(fault: Fault): void {
    this.faults.push({ ...fault, left: fault.times ?? 1 });
  }

  clearFaults(): void {
    this.faults = [];
  }

  private takeFault(method: string, path: string): Fault | undefined {
    const i = this.faults.findIndex((f) => (!f.method || f.method === method) && f.path.test(path));
    if (i < 0) return undefined;
    const f = this.faults[i]!;
    if (--f.left <= 0) this.faults.splice(i, 1);
    return f;
  }

  private async dispatch(
    handler: Handler,
    req: IncomingMessage,
    res: ServerResponse,
    url: URL,
  ): Promise<void> {
    const fault = this.takeFault(req.method ?? "GET", url.pathname);
    try {
      if (fault?.delayMs) await sleep(fault.delayMs);
      if (fault?.hang) return; // the socket is destroyed on close()
      if (fault?.drop && fault.dropAfterBytes === undefined) {
        req.socket.destroy();
        return;
      }
      if (fault?.status) {
        await readBody(req);
        sendJson(res, fault.status, fault.body ?? {}, fault.headers);
        return;
      }
      if (fault?.drop) cutAfter(res, fault.dropAfterBytes ?? 0);
      await handler(req, res, url);
    } catch (err) {
      if (!res.headersSent) sendJson(res, 500, { code: 500, message: (err as Error).message });
      else res.destroy();
    }
  }
}

/** Lets `n` bytes of the response body through, then destroys the connection. */
function cutAfter(res: ServerResponse, n: number): void {
  let sent = 0;
  const write = res.write.bind(res) as (chunk: unknown, ...rest: unknown[]) => boolean;
  const cut = () => setImmediate(() => res.socket?.destroy());
  res.write = ((chunk: unknown, ...rest: unknown[]) => {
    const buf = typeof chunk === "string" ? Buffer.from(chunk) : (chunk as Buffer);
    if (sent >= n) return true;
    const part = buf.subarray(0, n - sent);
    sent += part.length;
    const ok = write(part, ...rest);
    if (sent >= n) {
      // Flush what was allowed, then cut mid-body.
      cut();
    }
    return ok;
  }) as ServerResponse["write"];
  res.end = ((chunk?: unknown) => {
    if (chunk && typeof chunk !== "function") res.write(chunk as Buffer);
    cut();
    return res;
  }) as ServerResponse["end"];
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

export async function readBody(req: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
}

export async function readJson<T = Record<string, unknown>>(req: IncomingMessage): Promise<T> {
  const body = await readBody(req);
  return (body.length ? JSON.parse(body.toString("utf8")) : {}) as T;
}

export function sendJson(
  res: ServerResponse,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
): void {
  const data = Buffer.from(JSON.stringify(body));
  res.writeHead(status, {
    "content-type": "application/json",
    "content-length": String(data.length),
    ...headers,
  });
  res.end(data);
}

export function sendEmpty(res: ServerResponse, status: number): void {
  res.writeHead(status, { "content-length": "0" });
  res.end();
}

export interface Part {
  name: string;
  filename?: string;
  headers: Record<string, string>;
  data: Buffer;
}

/** Parses a multipart/form-data body (whole body in memory; the fakes move at most tens of MiB). */
export function parseMultipart(body: Buffer, contentType: string): Part[] {
  const m = /boundary=(?:"([^"]+)"|([^;]+))/i.exec(contentType);
  if (!m) throw new Error("multipart body without a boundary");
  const boundary = Buffer.from(`--${m[1] ?? m[2]}`);
  const parts: Part[] = [];
  let pos = body.indexOf(boundary);
  while (pos >= 0) {
    pos += boundary.length;
    if (body.subarray(pos, pos + 2).toString() === "--") break;
    pos += 2; // CRLF after the boundary line
    const headerEnd = body.indexOf("\r\n\r\n", pos);
    if (headerEnd < 0) break;
    const headers: Record<string, string> = {};
    for (const line of body.subarray(pos, headerEnd).toString("utf8").split("\r\n")) {
      const i = line.indexOf(":");
      if (i > 0) headers[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim();
    }
    const next = body.indexOf(boundary, headerEnd + 4);
    if (next < 0) break;
    const data = body.subarray(headerEnd + 4, next - 2); // minus the CRLF before the boundary
    const disp = headers["content-disposition"] ?? "";
    const name = /\bname="([^"]*)"/.exec(disp)?.[1] ?? "";
    const filename = /\bfilename="([^"]*)"/.exec(disp)?.[1];
    parts.push({ name, ...(filename !== undefined ? { filename } : {}), headers, data });
    pos = next;
  }
  return parts;
}

/** A server-side WebSocket: send binary/text frames and close; incoming frames are ignored. */
export class ServerWebSocket {
  private readonly socket: Socket;
  closed = false;
  onClose: (() => void) | null = null;
  /** Each data frame from the client (unfragmented, as Node clients send them). */
  onMessage: ((data: Buffer, binary: boolean) => void) | null = null;
  private pending = Buffer.alloc(0);

  /** Answers with `protocol` when the client offered it, else with the first it offered. */
  constructor(req: IncomingMessage, socket: Socket, protocol?: string) {
    this.socket = socket;
    const key = req.headers["sec-websocket-key"] ?? "";
    const accept = createHash("sha1")
      .update(`${key}258EAFA5-E914-47DA-95CA-C5AB0DC85B11`)
      .digest("base64");
    const offered = (req.headers["sec-websocket-protocol"] ?? "")
      .split(",")
      .map((p) => p.trim())
      .filter(Boolean);
    const chosen = protocol && offered.includes(protocol) ? protocol : offered[0];
    socket.write(
      "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
        `Sec-WebSocket-Accept: ${accept}\r\n${chosen ? `Sec-WebSocket-Protocol: ${chosen}\r\n` : ""}\r\n`,
    );
    socket.on("data", (d: Buffer) => this.receive(d));
    socket.on("close", () => {
      this.closed = true;
      this.onClose?.();
    });
    socket.on("error", () => undefined);
  }

  /** Parses the client's (masked) frames: data goes to onMessage, a close frame ends it. */
  private receive(d: Buffer): void {
    this.pending = Buffer.concat([this.pending, d]);
    for (;;) {
      const b = this.pending;
      if (b.length < 2) return;
      let len = b[1]! & 0x7f;
      let at = 2;
      if (len === 126) {
        if (b.length < 4) return;
        len = b.readUInt16BE(2);
        at = 4;
      } else if (len === 127) {
        if (b.length < 10) return;
        len = Number(b.readBigUInt64BE(2));
        at = 10;
      }
      const masked = (b[1]! & 0x80) !== 0;
      const end = at + (masked ? 4 : 0) + len;
      if (b.length < end) return;
      const payload = Buffer.from(b.subarray(end - len, end));
      if (masked) for (let i = 0; i < len; i++) payload[i]! ^= b[at + (i % 4)]!;
      this.pending = b.subarray(end);
      const opcode = b[0]! & 0x0f;
      if (opcode === 8) return this.close();
      if (opcode === 1 || opcode === 2) this.onMessage?.(payload, opcode === 2);
    }
  }

  send(data: Buffer, binary = true): void {
    if (this.closed) return;
    this.socket.write(Buffer.concat([frameHeader(binary ? 2 : 1, data.length), data]));
  }

  close(code = 1000, reason = ""): void {
    if (this.closed) return;
    this.closed = true;
    const text = Buffer.from(reason);
    const payload = Buffer.alloc(2 + text.length);
    payload.writeUInt16BE(code);
    text.copy(payload, 2);
    this.socket.end(Buffer.concat([frameHeader(8, payload.length), payload]));
  }

  destroy(): void {
    this.closed = true;
    this.socket.destroy();
  }
}

function frameHeader(opcode: number, len: number): Buffer {
  if (len < 126) return Buffer.from([0x80 | opcode, len]);
  if (len < 65536) {
    const b = Buffer.alloc(4);
    b[0] = 0x80 | opcode;
    b[1] = 126;
    b.writeUInt16BE(len, 2);
    return b;
  }
  const b = Buffer.alloc(10);
  b[0] = 0x80 | opcode;
  b[1] = 127;
  b.writeBigUInt64BE(BigInt(len), 2);
  return b;
}

/**
 * WebSocket through the provisioner, against the real cluster with the real operator: a small
 * RFC 6455 echo server (Python stdlib) runs inside a sandbox, started in the background through
 * sandboxd's command API, and is reached on /v1/sandboxes/:id/ports/:port/... (the provisioner
 * splices the upgrade onto sandboxd's TCP tunnel) and through the SDK's getHost(port) listener.
 *
 * Node's own WebSocket cannot send an Authorization header, so the provisioner path uses a raw
 * node:http upgrade and the small frame codec below; the getHost path, which needs no header,
 * uses Node's own WebSocket (undici), an implementation independent of both ends written here.
 */
import { createHash, randomBytes } from "node:crypto";
import { type IncomingHttpHeaders, request } from "node:http";
import type { Duplex } from "node:stream";
import { afterAll, beforeAll, describe, expect, inject, test } from "vitest";
import { KubernetesProvider } from "@sandpit/sdk/kubernetes";
import type { SandboxInstance } from "@sandpit/sdk";
import {
  type ProvisionerApi,
  type ProvisionerProcess,
  type Stack,
  provisionerCall,
  sandboxes,
  startStack,
  waitFor,
} from "../cluster/harness.ts";

const KEY_A = "ws-tenant-a-key-0123456789abcdef";
const KEY_B = "ws-tenant-b-key-0123456789abcdef";
const WS_PORT = 8765;
const CLOSED_PORT = 8799;

/**
 * The echo server: text and binary echoed with their opcode, ping answered with pong, a close
 * echoed (code and reason) before the connection ends. The text "close-me" makes the server
 * close first, with 4000; "stats" answers {open, served} connections. The 101 carries what the
 * server received (path, host, whether any credential arrived), so the test sees what the
 * provisioner forwarded.
 */
const SERVER = String.raw`
import base64, hashlib, json, socketserver, struct, sys, threading

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
lock = threading.Lock()
state = {"open": 0, "served": 0}

class Handler(socketserver.BaseRequestHandler):
    def read(self, n):
        while len(self.buf) < n:
            chunk = self.request.recv(1 << 20)
            if not chunk:
                raise EOFError
            self.buf += chunk
        out, self.buf = bytes(self.buf[:n]), self.buf[n:]
        return out

    def send(self, opcode, payload=b""):
        n = len(payload)
        if n < 126:
            head = struct.pack("!BB", 0x80 | opcode, n)
        elif n < 65536:
            head = struct.pack("!BBH", 0x80 | opcode, 126, n)
        else:
            head = struct.pack("!BBQ", 0x80 | opcode, 127, n)
        self.request.sendall(head + payload)

    def frame(self):
        b0, b1 = self.read(2)
        n = b1 & 0x7F
        if n == 126:
            n = struct.unpack("!H", self.read(2))[0]
        elif n == 127:
            n = struct.unpack("!Q", self.read(8))[0]
        if not b1 & 0x80:
            raise ValueError("unmasked client frame")
        mask = self.read(4)
        data = self.read(n)
        key = (mask * (n // 4 + 1))[:n]
        data = (int.from_bytes(data, "big") ^ int.from_bytes(key, "big")).to_bytes(n, "big")
        return b0 & 0x0F, data

    def handle(self):
        self.buf = bytearray()
        while b"\r\n\r\n" not in self.buf:
            chunk = self.request.recv(4096)
            if not chunk or len(self.buf) > 65536:
                return
            self.buf += chunk
        end = self.buf.index(b"\r\n\r\n")
        lines = bytes(self.buf[:end]).decode("latin-1").split("\r\n")
        self.buf = self.buf[end + 4:]
        path = lines[0].split(" ")[1]
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        key = headers.get("sec-websocket-key", "")
        if headers.get("upgrade", "").lower() != "websocket" or not key:
            body = b"WebSocket only\n"
            self.request.sendall(b"HTTP/1.1 426 Upgrade Required\r\nupgrade: websocket\r\n"
                                 b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(body), body))
            return
        accept = base64.b64encode(hashlib.sha1(key.encode() + GUID).digest()).decode()
        auth = "present" if "authorization" in headers or "x-api-key" in headers else "absent"
        self.request.sendall((
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Accept: {accept}\r\nX-Ws-Path: {path}\r\nX-Ws-Credentials: {auth}\r\n"
            f"X-Ws-Host: {headers.get('host', '')}\r\n\r\n").encode("latin-1"))
        with lock:
            state["open"] += 1
            state["served"] += 1
        try:
            self.session()
        except (EOFError, OSError, ValueError):
            pass
        finally:
            with lock:
                state["open"] -= 1

    def session(self):
        while True:
            opcode, data = self.frame()
            if opcode == 1 and data == b"close-me":
                self.send(8, struct.pack("!H", 4000) + b"server says bye")
                while self.frame()[0] != 8:
                    pass
                return
            if opcode == 1 and data == b"stats":
                with lock:
                    self.send(1, json.dumps(state).encode())
            elif opcode in (1, 2):
                self.send(opcode, data)
            elif opcode == 9:
                self.send(10, data)
            elif opcode == 8:
                self.send(8, data)
                return
            elif opcode != 10:
                self.send(8, struct.pack("!H", 1003))
                return

class Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True

Server(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
`;

// ---- A minimal WebSocket client: a node:http upgrade (any headers) and RFC 6455 frames ----

const GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
const OP = { text: 1, binary: 2, close: 8, ping: 9, pong: 10 } as const;

interface Frame {
  fin: boolean;
  opcode: number;
  payload: Buffer;
}

class WsClient {
  readonly socket: Duplex;
  /** Resolves once the TCP connection is gone (either side). */
  readonly gone: Promise<void>;
  #buf: Buffer = Buffer.alloc(0);
  #frames: Frame[] = [];
  #wake: (() => void) | undefined;
  #closed = false;
  #error: Error | undefined;

  constructor(socket: Duplex, head: Buffer) {
    this.socket = socket;
    open.add(this);
    this.gone = new Promise((resolve) =>
      socket.once("close", () => {
        this.#closed = true;
        open.delete(this);
        this.#wake?.();
        resolve();
      }),
    );
    socket.on("error", () => undefined); // "close" follows
    socket.on("data", (b: Buffer) => this.#feed(b));
    if (head.length) this.#feed(head);
  }

  #feed(chunk: Buffer): void {
    this.#buf = this.#buf.length ? Buffer.concat([this.#buf, chunk]) : chunk;
    for (;;) {
      const b = this.#buf;
      if (b.length < 2) break;
      if (b[1]! & 0x80) {
        this.#error = new Error("the server sent a masked frame (RFC 6455 §5.1)");
        this.socket.destroy();
        break;
      }
      let len = b[1]! & 0x7f;
      let off = 2;
      if (len === 126) {
        if (b.length < 4) break;
        len = b.readUInt16BE(2);
        off = 4;
      } else if (len === 127) {
        if (b.length < 10) break;
        len = Number(b.readBigUInt64BE(2));
        off = 10;
      }
      if (b.length < off + len) break;
      this.#frames.push({
        fin: (b[0]! & 0x80) !== 0,
        opcode: b[0]! & 0x0f,
        payload: Buffer.from(b.subarray(off, off + len)),
      });
      this.#buf = b.subarray(off + len);
    }
    this.#wake?.();
  }

  /** The next frame from the server; throws when none comes within `timeoutMs`. */
  async next(timeoutMs = 20_000): Promise<Frame> {
    const until = performance.now() + timeoutMs;
    while (!this.#frames.length) {
      if (this.#error) throw this.#error;
      if (this.#closed) throw new Error("the connection closed before the next frame");
      const left = until - performance.now();
      if (left <= 0) throw new Error(`no frame within ${timeoutMs} ms`);
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, left);
        this.#wake = () => {
          clearTimeout(t);
          resolve();
        };
      });
      this.#wake = undefined;
    }
    return this.#frames.shift()!;
  }

  /** One masked, final frame. */
  send(opcode: number, data: string | Buffer): Promise<void> {
    const payload = typeof data === "string" ? Buffer.from(data) : data;
    const n = payload.length;
    const head = Buffer.alloc(n < 126 ? 2 : n < 65536 ? 4 : 10);
    head[0] = 0x80 | opcode;
    if (n < 126) head[1] = 0x80 | n;
    else if (n < 65536) {
      head[1] = 0x80 | 126;
      head.writeUInt16BE(n, 2);
    } else {
      head[1] = 0x80 | 127;
      head.writeBigUInt64BE(BigInt(n), 2);
    }
    const mask = randomBytes(4);
    const masked = Buffer.allocUnsafe(n);
    for (let i = 0; i < n; i++) masked[i] = payload[i]! ^ mask[i & 3]!;
    return new Promise((resolve, reject) =>
      this.socket.write(Buffer.concat([head, mask, masked]), (err) =>
        err ? reject(err) : resolve(),
      ),
    );
  }

  close(code: number, reason = ""): Promise<void> {
    const body = Buffer.alloc(2 + Buffer.byteLength(reason));
    body.writeUInt16BE(code, 0);
    body.write(reason, 2);
    return this.send(OP.close, body);
  }

  /** Waits (bounded) for the TCP connection to end. */
  async ended(timeoutMs = 10_000): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      this.gone,
      new Promise((_, reject) => {
        timer = setTimeout(
          () => reject(new Error(`the connection was still open after ${timeoutMs} ms`)),
          timeoutMs,
        );
      }),
    ]).finally(() => clearTimeout(timer));
  }
}

/** Every connection still open, closed in afterAll. */
const open = new Set<WsClient>();

type Handshake =
  | { upgraded: true; status: number; headers: IncomingHttpHeaders; ws: WsClient }
  | { upgraded: false; status: number; headers: IncomingHttpHeaders; body: string; json: any }; // eslint-disable-line @typescript-eslint/no-explicit-any -- error bodies of several shapes

/**
 * An upgrade request to `url` with `headers`: the open connection on a 101 (after checking
 * Sec-WebSocket-Accept), else the status and body of whatever answered.
 */
function connect(
  url: string,
  headers: Record<string, string> = {},
  timeoutMs = 30_000,
): Promise<Handshake> {
  const key = randomBytes(16).toString("base64");
  return new Promise((resolve, reject) => {
    const req = request(url, {
      agent: false,
      timeout: timeoutMs,
      headers: {
        connection: "Upgrade",
        upgrade: "websocket",
        "sec-websocket-version": "13",
        "sec-websocket-key": key,
        ...headers,
      },
    });
    req.once("upgrade", (res, socket, head) => {
      socket.setTimeout(0);
      const expected = createHash("sha1")
        .update(key + GUID)
        .digest("base64");
      if (res.headers["sec-websocket-accept"] !== expected) {
        socket.destroy();
        reject(new Error(`wrong Sec-WebSocket-Accept: ${res.headers["sec-websocket-accept"]}`));
        return;
      }
      resolve({
        upgraded: true,
        status: res.statusCode ?? 0,
        headers: res.headers,
        ws: new WsClient(socket, head),
      });
    });
    req.once("response", (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (c: string) => (body += c));
      res.once("error", reject);
      res.once("end", () => {
        let json: unknown;
        try {
          json = JSON.parse(body);
        } catch {
          json = undefined;
        }
        resolve({ upgraded: false, status: res.statusCode ?? 0, headers: res.headers, body, json });
      });
    });
    req.once("timeout", () =>
      req.destroy(new Error(`no answer to the upgrade of ${url} within ${timeoutMs} ms`)),
    );
    req.once("error", reject);
    req.end();
  });
}

/** Connects and insists on a 101. */
async function upgraded(url: string, headers: Record<string, string> = {}) {
  const h = await connect(url, headers);
  if (!h.upgraded) throw new Error(`no upgrade: HTTP ${h.status} ${h.body}`);
  return h;
}

/** Connects and insists on a refusal: the status and body of the answer, never a 101. */
async function refused(url: string, headers: Record<string, string>) {
  const h = await connect(url, headers);
  if (h.upgraded) {
    h.ws.socket.destroy();
    throw new Error(`${url} was upgraded (HTTP 101) with ${JSON.stringify(Object.keys(headers))}`);
  }
  return h;
}

const text = (f: Frame) => f.payload.toString("utf8");

// ---- The cluster, the operator, the provisioner and one sandbox running the echo server ----

let stack: Stack;
let prov: ProvisionerProcess;
let id: string;
let sdkSandbox: SandboxInstance | undefined;
const bearer = { authorization: `Bearer ${KEY_A}` };
const wsUrl = (path = "/", port: number | string = WS_PORT, sandboxId = id) =>
  `${prov.url}/v1/sandboxes/${sandboxId}/ports/${port}${path}`;

const api: ProvisionerApi = (...args) => provisionerCall(prov.url, ...args);

/** Starts the echo server in sandbox `sandboxId`, in the background, and waits for it. */
async function startEchoServer(sandboxId: string): Promise<void> {
  // Through the command API: the command returns, the server keeps running.
  const started = await api("POST", `/v1/sandboxes/${sandboxId}/proxy/v1/commands/run`, KEY_A, {
    command:
      `cat > /tmp/ws_echo.py && ` +
      `(nohup python3 /tmp/ws_echo.py ${WS_PORT} > /tmp/ws_echo.log 2>&1 &) && echo started`,
    stdin: SERVER,
    timeoutMs: 20_000,
  });
  expect(started.status, JSON.stringify(started.json)).toBe(200);
  expect(started.json).toMatchObject({ exitCode: 0, stdout: "started\n", timedOut: false });
  const first = await waitFor(
    "the echo server in the sandbox to accept a WebSocket",
    30_000,
    async () => {
      const h = await connect(wsUrl("/ready", WS_PORT, sandboxId), bearer, 10_000);
      return h.upgraded ? h : undefined;
    },
    250,
  );
  await first.ws.close(1000);
  await first.ws.ended();
}

beforeAll(async () => {
  stack = await startStack({
    kubeconfig: inject("kubeconfig"),
    image: inject("clusterSandboxImage"),
    prefix: "ws",
    keys: [
      { key: KEY_A, tenant: "a", maxSandboxes: 5 },
      { key: KEY_B, tenant: "b", maxSandboxes: 5 },
    ],
  });
  prov = stack.prov;
  const s = await api("POST", "/v1/sandboxes", KEY_A, { threadId: "websocket" });
  expect(s.status, JSON.stringify(s.json)).toBe(201);
  expect(s.json.phase).toBe("Ready");
  id = s.json.id as string;
  await startEchoServer(id);
});

afterAll(async () => {
  for (const ws of open) ws.socket.destroy();
  await sdkSandbox?.kill().catch(() => undefined);
  await stack?.stop();
});

describe("WebSocket through /v1/sandboxes/:id/ports/:port/", () => {
  test(
    "echoes text, binary up to 1 MiB byte for byte, 200 messages in order, ping, then closes cleanly",
    { timeout: 120_000 },
    async () => {
      const { ws, status, headers } = await upgraded(wsUrl("/chat/room?user=u1&x=%2F"), bearer);
      expect(status).toBe(101);
      // What reached the server: the path below the port with its query, its own host, and
      // no credential of the provisioner's.
      expect(headers["x-ws-path"]).toBe("/chat/room?user=u1&x=%2F");
      expect(headers["x-ws-host"]).toBe(`127.0.0.1:${WS_PORT}`);
      expect(headers["x-ws-credentials"]).toBe("absent");

      const greeting = "héllo wörld ✓ 🧪";
      await ws.send(OP.text, greeting);
      const echoed = await ws.next();
      expect(echoed).toMatchObject({ fin: true, opcode: OP.text });
      expect(text(echoed)).toBe(greeting);

      // 7-bit, 16-bit and 64-bit payload lengths, each at its edges, then 1 MiB.
      for (const size of [0, 1, 125, 126, 65_535, 65_536, 1024 * 1024]) {
        const data = randomBytes(size);
        await ws.send(OP.binary, data);
        const back = await ws.next(30_000);
        expect(back.opcode, `size ${size}`).toBe(OP.binary);
        expect(back.payload.length, `size ${size}`).toBe(size);
        expect(back.payload.equals(data), `size ${size}: bytes differ`).toBe(true);
      }

      // 200 small messages written back to back come back complete and in order.
      const sent = Array.from({ length: 200 }, (_, i) => `message ${i} ${"·".repeat(i % 17)}`);
      await Promise.all(sent.map((m) => ws.send(OP.text, m)));
      const received: string[] = [];
      for (let i = 0; i < sent.length; i++) {
        const f = await ws.next();
        expect(f.opcode).toBe(OP.text);
        received.push(text(f));
      }
      expect(received).toEqual(sent);

      await ws.send(OP.ping, "are you there?");
      const pong = await ws.next();
      expect(pong.opcode).toBe(OP.pong);
      expect(text(pong)).toBe("are you there?");

      // The client closes: the server's close frame comes back with the code, then the
      // connection ends at every hop.
      await ws.close(1000, "done here");
      const close = await ws.next();
      expect(close.opcode).toBe(OP.close);
      expect(close.payload.readUInt16BE(0)).toBe(1000);
      expect(close.payload.subarray(2).toString()).toBe("done here");
      await ws.ended();
    },
  );

  test(
    "the server closing first reaches the client with its code; connections are independent and freed when cut",
    { timeout: 90_000 },
    async () => {
      // Three connections at once: each gets only its own echoes.
      const conns = await Promise.all([1, 2, 3].map(() => upgraded(wsUrl("/multi"), bearer)));
      await Promise.all(
        conns.map(async ({ ws }, i) => {
          for (let k = 0; k < 20; k++) await ws.send(OP.text, `conn ${i} #${k}`);
        }),
      );
      for (const [i, { ws }] of conns.entries()) {
        for (let k = 0; k < 20; k++) expect(text(await ws.next())).toBe(`conn ${i} #${k}`);
      }

      // The server closes first, with 4000: the client sees the code, answers, and the
      // connection ends.
      const first = conns[0]!.ws;
      await first.send(OP.text, "close-me");
      const close = await first.next();
      expect(close.opcode).toBe(OP.close);
      expect(close.payload.readUInt16BE(0)).toBe(4000);
      expect(close.payload.subarray(2).toString()).toBe("server says bye");
      await first.close(4000);
      await first.ended();

      // A client that vanishes without a close frame: the server's end of it is closed too
      // (the provisioner and sandboxd tear down both legs), so nothing leaks in the sandbox.
      conns[1]!.ws.socket.destroy();
      await conns[1]!.ws.ended();
      const watcher = conns[2]!.ws;
      const stats = await waitFor(
        "the server to see only the watching connection left",
        15_000,
        async () => {
          await watcher.send(OP.text, "stats");
          const s = JSON.parse(text(await watcher.next())) as { open: number; served: number };
          return s.open === 1 ? s : undefined;
        },
        200,
      );
      expect(stats.open).toBe(1);
      await watcher.close(1000);
      expect((await watcher.next()).opcode).toBe(OP.close);
      await watcher.ended();
    },
  );

  test(
    "a missing or wrong key is refused before any upgrade; bad and closed ports are clear errors",
    { timeout: 90_000 },
    async () => {
      const cases: [string, Record<string, string>][] = [
        ["no key", {}],
        ["an unknown key", { authorization: "Bearer not-a-key-at-all-0123456789" }],
        ["a key without Bearer", { authorization: KEY_A }],
        ["the DeerFlow header, not a credential here", { "x-api-key": KEY_A }],
      ];
      for (const [what, headers] of cases) {
        const h = await refused(wsUrl("/"), headers);
        expect(h.status, what).toBe(401);
        expect(h.headers["content-type"], what).toMatch(/application\/json/);
        expect(h.json.error.code, what).toBe("UNAUTHORIZED");
      }
      // Another tenant's sandbox does not exist for this key; nor does an unknown one.
      expect((await refused(wsUrl("/"), { authorization: `Bearer ${KEY_B}` })).status).toBe(404);
      expect(
        (await refused(`${prov.url}/v1/sandboxes/no-such-sandbox/ports/${WS_PORT}/`, bearer))
          .status,
      ).toBe(404);

      // Nothing listens: 502 naming the port, not a hang and not a 101.
      const closed = await refused(wsUrl("/", CLOSED_PORT), bearer);
      expect(closed.status).toBe(502);
      expect(closed.json.error.code).toBe("UPSTREAM_UNAVAILABLE");
      expect(closed.json.error.message).toMatch(
        new RegExp(`nothing listens on port ${CLOSED_PORT}`),
      );

      for (const bad of ["0", "70000", "abc", "-1", "8765x"]) {
        const h = await refused(wsUrl("/", bad), bearer);
        expect(h.status, bad).toBe(400);
        expect(h.json.error.code, bad).toBe("INVALID_ARGUMENT");
        expect(h.json.error.message, bad).toMatch(/port/);
      }

      // The same server still works after all that, also with no path after the port.
      const { ws, headers } = await upgraded(wsUrl("?after=1"), bearer);
      expect(headers["x-ws-path"]).toBe("/?after=1");
      await ws.send(OP.text, "still here");
      expect(text(await ws.next())).toBe("still here");
      await ws.close(1000);
      expect((await ws.next()).opcode).toBe(OP.close);
      await ws.ended();
    },
  );
});

describe("a WebSocket in use is activity", () => {
  test(
    "messages every 2 s keep a sandbox with a 60 s idle timeout Ready for 80 s",
    { timeout: 240_000 },
    async () => {
      const s = await api("POST", "/v1/sandboxes", KEY_A, {
        threadId: "websocket-idle",
        idleTimeoutSeconds: 60,
      });
      expect(s.status, JSON.stringify(s.json)).toBe(201);
      const idle = s.json.id as string;
      await startEchoServer(idle);
      const readyAt = Date.now();
      const { ws } = await upgraded(wsUrl("/idle", WS_PORT, idle), bearer);
      // Nothing but this connection touches the sandbox from here on.
      for (let i = 0; Date.now() - readyAt < 80_000 && i < 60; i++) {
        await ws.send(OP.text, `tick ${i}`);
        expect(text(await ws.next()), "the echo of a tick").toBe(`tick ${i}`);
        await new Promise((r) => setTimeout(r, 2_000));
      }
      const obj = await sandboxes.get(stack.c, stack.ns, idle);
      expect(obj.status?.phase, JSON.stringify(obj.status)).toBe("Ready");
      const last = Date.parse(obj.status!.lastActivityTime!);
      expect(last - readyAt, "lastActivityTime moved on while messages flowed").toBeGreaterThan(
        40_000,
      );
      await ws.close(1000);
      expect((await ws.next()).opcode).toBe(OP.close);
      await ws.ended();
    },
  );
});

describe("WebSocket through the SDK's getHost(port)", () => {
  /** Node's own WebSocket (undici) with a bounded queue of what arrives. */
  async function browserSocket(url: string, timeoutMs = 30_000) {
    const ws = new WebSocket(url);
    ws.binaryType = "arraybuffer";
    const queue: (string | Buffer)[] = [];
    let wake: (() => void) | undefined;
    let closed: { code: number; reason: string; wasClean: boolean } | undefined;
    ws.addEventListener("message", (e) => {
      queue.push(typeof e.data === "string" ? e.data : Buffer.from(e.data as ArrayBuffer));
      wake?.();
    });
    ws.addEventListener("close", (e) => {
      closed = { code: e.code, reason: e.reason, wasClean: e.wasClean };
      wake?.();
    });
    const wait = async (what: string, ready: () => boolean, ms: number) => {
      const until = performance.now() + ms;
      while (!ready()) {
        const left = until - performance.now();
        if (left <= 0) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
        await new Promise<void>((resolve) => {
          const t = setTimeout(resolve, left);
          wake = () => {
            clearTimeout(t);
            resolve();
          };
        });
        wake = undefined;
      }
    };
    ws.addEventListener("open", () => wake?.());
    ws.addEventListener("error", () => wake?.());
    await wait("the WebSocket to open", () => ws.readyState !== WebSocket.CONNECTING, timeoutMs);
    if (ws.readyState !== WebSocket.OPEN) throw new Error(`${url} did not open`);
    return {
      ws,
      next: async (ms = 20_000) => {
        await wait("a message", () => queue.length > 0 || closed !== undefined, ms);
        if (!queue.length) throw new Error(`closed (${closed?.code}) before the next message`);
        return queue.shift()!;
      },
      closed: async (ms = 10_000) => {
        await wait("the close", () => closed !== undefined, ms);
        return closed!;
      },
    };
  }

  test(
    "the kubernetes provider's local tunnel carries a WebSocket session end to end",
    { timeout: 120_000 },
    async () => {
      const provider = new KubernetesProvider({ provisionerUrl: prov.url, apiKey: KEY_A });
      sdkSandbox = await provider.resume(id);
      const host = await sdkSandbox.getHost(WS_PORT);
      expect(host).toMatch(/^127\.0\.0\.1:\d+$/);

      const a = await browserSocket(`ws://${host}/via-sdk?n=1`);
      const b = await browserSocket(`ws://${host}/via-sdk?n=2`); // one tunnel per connection
      a.ws.send("hello from undici ✓");
      b.ws.send("second connection");
      expect(await a.next()).toBe("hello from undici ✓");
      expect(await b.next()).toBe("second connection");

      const data = randomBytes(1024 * 1024);
      a.ws.send(data);
      const back = await a.next(30_000);
      expect(Buffer.isBuffer(back)).toBe(true);
      expect((back as Buffer).equals(data)).toBe(true);

      for (let i = 0; i < 200; i++) a.ws.send(`n${i}`);
      const got: (string | Buffer)[] = [];
      for (let i = 0; i < 200; i++) got.push(await a.next());
      expect(got).toEqual(Array.from({ length: 200 }, (_, i) => `n${i}`));

      // Both directions of closing: the client with its code, the server with 4000.
      a.ws.close(4001, "client done");
      expect(await a.closed()).toEqual({ code: 4001, reason: "client done", wasClean: true });
      b.ws.send("close-me");
      expect(await b.closed()).toEqual({ code: 4000, reason: "server says bye", wasClean: true });

      // A port nothing listens on: the connection is accepted locally, then dropped.
      const dead = await sdkSandbox.getHost(CLOSED_PORT);
      const refused = await browserSocket(`ws://${dead}/`).then(
        () => "opened",
        (err: Error) => err.message,
      );
      expect(refused).toMatch(/did not open/);
    },
  );
});

/**
 * The terminal API (docs/terminals.md): HTTP routes to create, inspect, type into, resize and
 * kill a terminal, and `GET /v1/pty/<pid>/connect`, a WebSocket carrying the terminal's bytes
 * both ways (binary frames) and a small JSON control protocol (text frames). All behind the same
 * bearer token as every route: the HTTP ones through the app's gate, the WebSocket through the
 * upgrade dispatcher (upgrades.ts).
 */
import { readJson, readRaw, sendEmpty, sendJson, type Req, type Routes } from "./http.ts";
import type { RawData, WebSocket, WebSocketServer } from "ws";
import type { Terminals } from "./ptys.ts";
import { PTY_CLOSE, SandboxdError, type PtyServerMessage } from "./wire.ts";
import type { PtyClientMessage } from "./protocol.ts";
import type { UpgradeRoute } from "./upgrades.ts";
import { check, parse, requestSchemas, type RequestSchemas } from "./request-input.ts";

type ControlSchema = ReturnType<RequestSchemas["ptyClientMessage"]>;

/** Largest input accepted in one HTTP call or one WebSocket frame. */
const MAX_INPUT_BYTES = 1024 * 1024;

export function ptyRoutes(r: Routes, terminals: Terminals): void {
  const json = (req: Req) => readJson(req, 64 * 1024);

  r.post("/v1/pty", async (req, res) => {
    const terminal = await terminals.create(await parse("ptyCreate", await json(req)));
    sendJson(res, { pid: terminal.pid }, 201);
  });

  r.get("/v1/pty/:pid", (req, res) => {
    sendJson(res, terminals.get(pidOf(req)).info());
  });

  // Input is raw bytes, whatever the content type says.
  r.post("/v1/pty/:pid/input", async (req, res) => {
    const input = await readRaw(req, MAX_INPUT_BYTES);
    const terminal = terminals.get(pidOf(req));
    if (!terminal.running)
      throw new SandboxdError("CONFLICT", `terminal ${terminal.pid} has exited`);
    terminal.write(input ?? Buffer.alloc(0));
    sendEmpty(res);
  });

  r.post("/v1/pty/:pid/resize", async (req, res) => {
    const size = await parse("ptySize", await json(req));
    const terminal = terminals.get(pidOf(req));
    if (!terminal.running)
      throw new SandboxdError("CONFLICT", `terminal ${terminal.pid} has exited`);
    terminal.resize(size);
    sendEmpty(res);
  });

  r.delete("/v1/pty/:pid", async (req, res) => {
    sendJson(res, { killed: await terminals.get(pidOf(req)).kill() });
  });
}

/**
 * `GET /v1/pty/<pid>/connect`: the kept output first (none with `?replay=false`), then live
 * output, as binary frames; binary frames from the client are input. Text frames are JSON
 * control messages: `{"type":"resize","cols","rows"}` from the client, `{"type":"exit",
 * "exitCode"}` from the server (then close 1000). An unknown pid closes with 4404, a bad control
 * message or `replay` value with 1008 and the reason.
 */
export function ptyUpgradeRoute(terminals: Terminals): UpgradeRoute {
  // ws, and the control messages' schema, are loaded on the first terminal connection, not at
  // start: most sandboxes never open one. Inside the image's bundle the imports are resolved
  // promises (no I/O before handleUpgrade).
  let loaded: Promise<{ wss: WebSocketServer; control: ControlSchema }> | null = null;
  return {
    path: /^\/v1\/pty\/(\d{1,9})\/connect$/,
    async handle(req, socket, head, match) {
      const replay = new URL(req.url ?? "/", "http://x").searchParams.get("replay");
      loaded ??= Promise.all([import("ws"), requestSchemas()]).then(
        ([{ WebSocketServer }, schemas]) => ({
          wss: new WebSocketServer({ noServer: true, maxPayload: MAX_INPUT_BYTES }),
          control: schemas.ptyClientMessage(),
        }),
      );
      const { wss, control } = await loaded;
      wss.handleUpgrade(req, socket, head, (ws) => {
        // `?replay=false`: new output only (a client that follows from the moment it attaches).
        if (replay !== null && replay !== "true" && replay !== "false")
          ws.close(PTY_CLOSE.badMessage, "replay must be true or false");
        else attach(terminals, Number(match[1]), ws, replay !== "false", control);
      });
    },
  };
}

function attach(
  terminals: Terminals,
  pid: number,
  ws: WebSocket,
  replay: boolean,
  control: ControlSchema,
): void {
  let terminal;
  try {
    terminal = terminals.get(pid);
  } catch (err) {
    ws.close(PTY_CLOSE.notFound, (err as Error).message);
    return;
  }
  const detach = terminal.attach(
    {
      send: (data, done) => ws.send(data, { binary: true }, () => done()),
      exit: (exitCode) => {
        const message: PtyServerMessage = { type: "exit", exitCode };
        ws.send(JSON.stringify(message));
        ws.close(1000, "exited");
      },
      close: () => ws.close(PTY_CLOSE.goingAway, "sandboxd is stopping"),
    },
    replay,
  );
  ws.on("message", (data: RawData, isBinary: boolean) => {
    const bytes = Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data as ArrayBuffer);
    if (isBinary) return terminal.write(bytes);
    let message: PtyClientMessage;
    try {
      message = check(control, JSON.parse(bytes.toString("utf8")));
    } catch (err) {
      const why = err instanceof SandboxdError ? err.message : "not JSON";
      // A close reason is at most 123 bytes.
      ws.close(PTY_CLOSE.badMessage, `bad control message: ${why}`.slice(0, 120));
      return;
    }
    terminal.resize(message);
  });
  ws.on("close", detach);
  ws.on("error", () => ws.terminate());
}

function pidOf(req: Req): number {
  const pid = Number(req.params.pid);
  if (!/^\d{1,9}$/.test(String(req.params.pid)) || pid < 1)
    throw new SandboxdError("INVALID_ARGUMENT", "pid must be a positive integer");
  return pid;
}

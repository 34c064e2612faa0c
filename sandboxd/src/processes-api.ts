/**
 * The background-process routes (docs/architecture.md, "Background processes"): start, list,
 * look up, attach to the output (NDJSON, replayed from any offset the ring still holds, or from
 * the end for new output only, then live, then the exit), stdin in chunks, close stdin, signal. Behind the same token as every native route.
 */
import type { Terminals } from "./ptys.ts";
import {
  readJson,
  readRaw,
  sendEmpty,
  sendJson,
  startStream,
  type Req,
  type Res,
  type Routes,
} from "./http.ts";
import type { BackgroundProcess, ProcessTable } from "./processes.ts";
import { MAX_STDIN_BYTES, SandboxdError, type ProcessStreamEvent } from "./wire.ts";
import { parse, wantsNdjson } from "./request-input.ts";

/**
 * `terminals` are listed beside the processes (`pty: true`), as `commands.list()` promises;
 * everything else about them is on their own routes (pty-routes.ts).
 */
export function processesRoutes(r: Routes, table: ProcessTable, terminals: Terminals): void {
  const json = (req: Req) => readJson(req, 2 * MAX_STDIN_BYTES);

  r.post("/v1/processes", async (req, res) => {
    const proc = await table.start(await parse("startProcess", await json(req)));
    // Streamed, the answer is the output from the start, so one request starts and reads.
    if (wantsNdjson(req)) streamOutput(proc, 0, res);
    else sendJson(res, proc.entry(), 201);
  });

  r.get("/v1/processes", (_req, res) => {
    sendJson(res, { processes: [...table.list().map((p) => p.entry()), ...terminals.list()] });
  });

  r.get("/v1/processes/:pid", (req, res) => {
    sendJson(res, table.get(pid(req)).entry());
  });

  r.get("/v1/processes/:pid/output", (req, res) => {
    const proc = table.get(pid(req));
    streamOutput(proc, offset(req, proc), res);
  });

  // stdin is raw bytes, whatever the content type says.
  r.post("/v1/processes/:pid/stdin", async (req, res) => {
    const body = await readRaw(req, MAX_STDIN_BYTES);
    table.writeStdin(pid(req), body ?? Buffer.alloc(0));
    sendEmpty(res);
  });

  r.post("/v1/processes/:pid/stdin/close", (req, res) => {
    table.closeStdin(pid(req));
    sendEmpty(res);
  });

  r.post("/v1/processes/:pid/signal", async (req, res) => {
    const { signal } = await parse("signalProcess", await json(req));
    sendJson(res, { delivered: table.signal(pid(req), signal) });
  });
}

function pid(req: Req): number {
  const text = String(req.params.pid);
  if (!/^[1-9]\d{0,9}$/.test(text))
    throw new SandboxdError("INVALID_ARGUMENT", `pid must be a positive integer, not ${text}`);
  return Number(text);
}

/** `?offset=`: a byte offset of the combined output (default 0), or `end`: new output only. */
function offset(req: Req, proc: BackgroundProcess): number {
  const text = req.query.offset;
  if (text === undefined) return 0;
  // The end as it is now: the reader follows from the moment it attaches.
  if (text === "end") return proc.ring.end;
  if (typeof text !== "string" || !/^\d{1,15}$/.test(text))
    throw new SandboxdError("INVALID_ARGUMENT", 'offset must be a non-negative integer or "end"');
  const n = Number(text);
  if (n > proc.ring.end) {
    throw new SandboxdError(
      "INVALID_ARGUMENT",
      `offset ${n} is past the end of the output of process ${proc.pid} (${proc.ring.end} bytes)`,
    );
  }
  return n;
}

/**
 * Sends the output from `from` on as NDJSON, then follows it live until the exit line. A reader
 * is a cursor into the ring, advanced as fast as the connection takes it: a slow reader never
 * makes sandboxd buffer more than the ring, it is told what it missed instead (`dropped`).
 * Closing the connection detaches the reader and nothing else.
 */
function streamOutput(proc: BackgroundProcess, from: number, res: Res): void {
  startStream(res, "application/x-ndjson");
  const send = (event: ProcessStreamEvent) => res.write(JSON.stringify(event) + "\n");
  const droppedBytes = Math.max(0, proc.ring.start - from);
  send({ stream: "attached", pid: proc.pid, offset: from, droppedBytes });
  let cursor = from + droppedBytes;
  let blocked = false;
  const pump = () => {
    if (blocked || res.writableEnded) return;
    const start = proc.ring.start;
    if (cursor < start) {
      send({ stream: "dropped", offset: cursor, bytes: start - cursor });
      cursor = start;
    }
    for (const chunk of proc.ring.from(cursor)) {
      cursor = chunk.offset + chunk.bytes.length;
      const data = chunk.bytes.toString("utf8");
      if (!send({ stream: chunk.stream, data, offset: chunk.offset })) {
        blocked = true;
        res.once("drain", () => {
          blocked = false;
          pump();
        });
        return;
      }
    }
    if (proc.exit) {
      proc.listeners.delete(pump);
      send(proc.exit);
      res.end();
    }
  };
  proc.listeners.add(pump);
  res.once("close", () => proc.listeners.delete(pump));
  pump();
}

/**
 * The background-process routes (docs/architecture.md, "Background processes"): start, list,
 * look up, attach to the output (NDJSON, replayed from any offset the ring still holds, or from
 * the end for new output only, then live, then the exit), stdin in chunks, close stdin, signal. Behind the same token as every native route.
 */
import type { Terminals } from "./ptys.ts";
import express, { type Request, type Response } from "express";
import type { BackgroundProcess, ProcessTable } from "./processes.ts";
import {
  MAX_STDIN_BYTES,
  SandboxdError,
  SignalProcessRequest,
  StartProcessRequest,
  type ProcessStreamEvent,
} from "./protocol.ts";
import { parse, wantsNdjson } from "./request-input.ts";

/**
 * `terminals` are listed beside the processes (`pty: true`), as `commands.list()` promises;
 * everything else about them is on their own routes (pty-routes.ts).
 */
export function processesRouter(table: ProcessTable, terminals: Terminals): express.Router {
  const r = express.Router();
  const json = express.json({ limit: 2 * MAX_STDIN_BYTES });
  // stdin is raw bytes, whatever the content type says.
  const raw = express.raw({ type: () => true, limit: MAX_STDIN_BYTES });

  r.post("/v1/processes", json, async (req, res) => {
    const proc = await table.start(parse(StartProcessRequest, req.body));
    // Streamed, the answer is the output from the start, so one request starts and reads.
    if (wantsNdjson(req)) streamOutput(proc, 0, res);
    else res.status(201).json(proc.entry());
  });

  r.get("/v1/processes", (_req, res) => {
    res.json({ processes: [...table.list().map((p) => p.entry()), ...terminals.list()] });
  });

  r.get("/v1/processes/:pid", (req, res) => {
    res.json(table.get(pid(req)).entry());
  });

  r.get("/v1/processes/:pid/output", (req, res) => {
    const proc = table.get(pid(req));
    streamOutput(proc, offset(req, proc), res);
  });

  r.post("/v1/processes/:pid/stdin", raw, (req, res) => {
    const body: unknown = req.body;
    table.writeStdin(pid(req), Buffer.isBuffer(body) ? body : Buffer.alloc(0));
    res.status(204).end();
  });

  r.post("/v1/processes/:pid/stdin/close", (req, res) => {
    table.closeStdin(pid(req));
    res.status(204).end();
  });

  r.post("/v1/processes/:pid/signal", json, (req, res) => {
    const { signal } = parse(SignalProcessRequest, req.body);
    res.json({ delivered: table.signal(pid(req), signal) });
  });

  return r;
}

function pid(req: Request): number {
  const text = String(req.params.pid);
  if (!/^[1-9]\d{0,9}$/.test(text))
    throw new SandboxdError("INVALID_ARGUMENT", `pid must be a positive integer, not ${text}`);
  return Number(text);
}

/** `?offset=`: a byte offset of the combined output (default 0), or `end`: new output only. */
function offset(req: Request, proc: BackgroundProcess): number {
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
function streamOutput(proc: BackgroundProcess, from: number, res: Response): void {
  res.status(200).type("application/x-ndjson");
  res.flushHeaders();
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

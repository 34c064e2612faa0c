/**
 * The code-context routes (docs/code-contexts.md), behind sandboxd's token like every native
 * route: create, list and remove contexts, and run a cell, whose events stream back as NDJSON.
 */
import type { CodeContexts } from "./contexts.ts";
import { readJson, sendEmpty, sendJson, startStream, type Req, type Routes } from "./http.ts";
import { MAX_SOURCE_BYTES, type CellEvent } from "./wire.ts";
import { parse } from "./request-input.ts";

export function contextRoutes(r: Routes, contexts: CodeContexts): void {
  const json = (req: Req) => readJson(req, MAX_SOURCE_BYTES + 64 * 1024);

  r.post("/v1/contexts", async (req, res) => {
    const body = await parse("createContext", await json(req));
    const ctx = await contexts.create(body.language, body.cwd);
    sendJson(res, ctx.info(), 201);
  });

  r.get("/v1/contexts", (_req, res) => {
    sendJson(res, { contexts: contexts.list().map((c) => c.info()) });
  });

  r.delete("/v1/contexts/:id", async (req, res) => {
    await contexts.remove(req.params.id!);
    sendEmpty(res);
  });

  r.post("/v1/contexts/:id/execute", async (req, res) => {
    const body = await parse("executeCell", await json(req));
    // A client that goes away interrupts its cell (or drops it, if it was still waiting).
    const abort = new AbortController();
    res.on("close", () => {
      if (!res.writableFinished) abort.abort();
    });
    const send = (event: CellEvent) => res.write(JSON.stringify(event) + "\n");
    // Throws NOT_FOUND or CONFLICT before the first event, so those are plain error answers.
    const done = contexts.need(req.params.id!).execute(body, send, abort.signal);
    startStream(res, "application/x-ndjson");
    await done;
    res.end();
  });
}

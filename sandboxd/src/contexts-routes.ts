/**
 * The code-context routes (docs/code-contexts.md), behind sandboxd's token like every native
 * route: create, list and remove contexts, and run a cell, whose events stream back as NDJSON.
 */
import express, { type Router } from "express";
import type { CodeContexts } from "./contexts.ts";
import {
  CreateContextRequest,
  ExecuteCellRequest,
  MAX_SOURCE_BYTES,
  type CellEvent,
} from "./protocol.ts";
import { parse } from "./request-input.ts";

export function contextRoutes(contexts: CodeContexts): Router {
  const r = express.Router();
  const json = express.json({ limit: MAX_SOURCE_BYTES + 64 * 1024 });

  r.post("/v1/contexts", json, async (req, res) => {
    const body = parse(CreateContextRequest, req.body);
    const ctx = await contexts.create(body.language, body.cwd);
    res.status(201).json(ctx.info());
  });

  r.get("/v1/contexts", (_req, res) => {
    res.json({ contexts: contexts.list().map((c) => c.info()) });
  });

  r.delete("/v1/contexts/:id", async (req, res) => {
    await contexts.remove(req.params.id);
    res.status(204).end();
  });

  r.post("/v1/contexts/:id/execute", json, async (req, res) => {
    const body = parse(ExecuteCellRequest, req.body);
    // A client that goes away interrupts its cell (or drops it, if it was still waiting).
    const abort = new AbortController();
    res.on("close", () => {
      if (!res.writableFinished) abort.abort();
    });
    const send = (event: CellEvent) => res.write(JSON.stringify(event) + "\n");
    // Throws NOT_FOUND or CONFLICT before the first event, so those are plain error answers.
    const done = contexts.need(req.params.id).execute(body, send, abort.signal);
    res.status(200).type("application/x-ndjson");
    res.flushHeaders();
    await done;
    res.end();
  });

  return r;
}

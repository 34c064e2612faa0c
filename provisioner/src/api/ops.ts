/**
 * The service's own routes, without an API key: liveness, readiness (for the Service to route
 * by) and the OpenAPI document (public, as any API's reference is). Prometheus metrics are not
 * here: they have a port of their own (server.ts), which no Ingress exposes.
 */
import { Router } from "express";
import { openApi } from "./openapi.ts";

export interface OpsDeps {
  /** Why this replica should get no traffic now, or undefined when it should. */
  notReady: () => string | undefined;
}

export function opsRouter(d: OpsDeps): Router {
  const r = Router();
  const doc = openApi();
  r.get("/healthz", (_req, res) => {
    res.type("text/plain").send("ok\n");
  });
  r.get("/readyz", (_req, res) => {
    const why = d.notReady();
    if (why) res.status(503).type("text/plain").send(`${why}\n`);
    else res.type("text/plain").send("ok\n");
  });
  r.get("/openapi.json", (_req, res) => {
    res.json(doc);
  });
  return r;
}

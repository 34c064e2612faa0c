/**
 * The provisioner's Prometheus registry and the middleware that counts and times every request
 * (proxied streams for as long as they last).
 */
import type { RequestHandler } from "express";
import { Counter, Histogram, Registry, collectDefaultMetrics } from "prom-client";

export function httpMetrics(): { registry: Registry; middleware: RequestHandler } {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  const requests = new Counter({
    name: "sandpit_provisioner_requests_total",
    help: "HTTP requests by route and status code",
    labelNames: ["route", "method", "code"] as const,
    registers: [registry],
  });
  const duration = new Histogram({
    name: "sandpit_provisioner_request_duration_seconds",
    help: "HTTP request duration by route (proxied streams included)",
    labelNames: ["route"] as const,
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120],
    registers: [registry],
  });
  const middleware: RequestHandler = (req, res, next) => {
    const end = duration.startTimer();
    res.on("close", () => {
      const route = routeLabel(req.route?.path, req.path);
      end({ route });
      requests.inc({ route, method: req.method, code: String(res.statusCode) });
    });
    next();
  };
  return { registry, middleware };
}

/** Route labels stay few: parameters are not part of them. */
function routeLabel(route: unknown, path: string): string {
  if (typeof route === "string") return route;
  return path.startsWith("/aio/") ? "/aio/*" : "unmatched";
}

/**
 * The E2B-compatible API's one way in (docs/e2b.md), ahead of the native routes:
 *
 *  - path prefix `/e2b` (E2B_API_URL and E2B_SANDBOX_URL both `<provisioner>/e2b`): a request
 *    carrying `E2b-Sandbox-Id` is data plane (port from `E2b-Sandbox-Port`, default 49983),
 *    any other is control plane;
 *  - hosts, when an E2B domain is set (E2B_DOMAIN): `api.<domain>` is the control plane and
 *    `<port>-<sandboxId>.<domain>` a sandbox's port, both at the root path;
 *  - signed `/files` URLs (`signature` in the query), which the SDKs build without the sandbox
 *    headers (at the root path: `new URL("/files", sandboxUrl)` drops `/e2b`): the sandbox is
 *    the one whose access token made the signature.
 *
 * Ports 49983 (envd) and 49999 (the code interpreter) need the sandbox's envd access token
 * (`X-Access-Token`, or a valid signature on /files; /health needs none, as on E2B; 49999 also
 * takes the traffic token, `E2B-Traffic-Access-Token`, all its /contexts calls carry) and are
 * served by ./envd/ over the sandbox's SandboxInstance. Any other port is public, as on E2B: the
 * request goes to that port inside the sandbox, WebSocket upgrades included.
 */
import type { IncomingHttpHeaders, IncomingMessage } from "node:http";
import type { Duplex } from "node:stream";
import type { NextFunction, Request, Response } from "express";
import type { Logger } from "pino";
import { LABEL } from "@sandpit/operator/api";
import { isPort } from "@sandpit/sandboxd/protocol";
import { ApiError } from "../errors.ts";
import type { Sandbox } from "../../sandboxes.ts";
import { type E2bDeps, controlRouter } from "./control.ts";
import {
  ENVD_PORT,
  ENVD_VERSION,
  INTERPRETER_PORT,
  filesSignatureValid,
  requestUrl,
  serveEnvd,
} from "./envd/index.ts";
import { e2bErrorHandler, endSocketE2b, serverFault, writeE2bError } from "./errors.ts";
import { SandboxInstances } from "./instance.ts";
import { autoResumes, stateOf } from "./records.ts";
import { EnvdTokens } from "./tokens.ts";

export const E2B_PREFIX = "/e2b";

/** Where a request goes: paths are below the prefix (or the root), with their query. */
export type E2bRoute =
  | { kind: "control"; path: string }
  | { kind: "data"; sandboxId: string; port: number; path: string }
  | { kind: "signed-files"; path: string }
  | { kind: "refused"; error: ApiError };

/**
 * Routes a request by its URL and headers; undefined: not the E2B API's (the native routes).
 * Pure, so every way in is tested without a cluster.
 */
export function routeOf(
  url: string,
  headers: IncomingHttpHeaders,
  domain: string | undefined,
): E2bRoute | undefined {
  const q = url.indexOf("?");
  const pathname = q >= 0 ? url.slice(0, q) : url;
  const search = q >= 0 ? url.slice(q) : "";
  const signed = (p: string) => p === "/files" && new URLSearchParams(search).has("signature");
  if (domain) {
    const host = (headers.host ?? "").toLowerCase().replace(/:\d+$/, "").replace(/\.$/, "");
    if (host === `api.${domain}`) return { kind: "control", path: url };
    if (host.endsWith(`.${domain}`)) {
      const m = /^(\d{1,5})-([a-z0-9]([-a-z0-9]*[a-z0-9])?)$/.exec(
        host.slice(0, -domain.length - 1),
      );
      const port = Number(m?.[1]);
      if (!m || !isPort(port))
        return {
          kind: "refused",
          error: new ApiError(
            "NOT_FOUND",
            `"${host}" is not a sandbox host (<port>-<sandboxId>.${domain})`,
          ),
        };
      return { kind: "data", sandboxId: m[2]!, port, path: url };
    }
  }
  if (pathname === E2B_PREFIX || pathname.startsWith(`${E2B_PREFIX}/`)) {
    const rest = pathname.slice(E2B_PREFIX.length) || "/";
    const id = headers["e2b-sandbox-id"];
    if (typeof id === "string" && id) {
      const raw = headers["e2b-sandbox-port"];
      const port =
        raw === undefined ? ENVD_PORT : /^\d{1,5}$/.test(String(raw)) ? Number(raw) : NaN;
      if (!isPort(port))
        return {
          kind: "refused",
          error: new ApiError(
            "INVALID_ARGUMENT",
            `E2b-Sandbox-Port: a port from 1 to 65535, not "${String(raw)}"`,
          ),
        };
      return { kind: "data", sandboxId: id, port, path: rest + search };
    }
    if (signed(rest)) return { kind: "signed-files", path: rest + search };
    return { kind: "control", path: rest + search };
  }
  if (signed(pathname)) return { kind: "signed-files", path: pathname + search };
  return undefined;
}

/**
 * The answer E2B's edge gives for a sandbox it cannot reach; the SDKs read 502 as "not running".
 * The caller's condition, not a failure here: NOT_FOUND answered with E2B's status.
 */
const notRunning = (id: string, why = "was not found") =>
  new ApiError("NOT_FOUND", `The sandbox ${id} ${why}`, { status: 502 });

export interface E2bApi {
  /** express middleware, mounted before every other route. */
  middleware: (req: Request, res: Response, next: NextFunction) => void;
  /** The upgrade handler's first say: undefined when the upgrade is not the E2B API's. */
  upgrade: (req: IncomingMessage, socket: Duplex, head: Buffer) => Promise<void> | undefined;
}

export function e2bApi(base: Omit<E2bDeps, "tokens">, log: Pick<Logger, "error">): E2bApi {
  const e2b = base.cfg.e2b;
  const domain = e2b?.domain;
  if (!e2b) {
    // Off without its secret: say so instead of "no such route", and never invent a secret.
    const off = new ApiError(
      "NOT_FOUND",
      "the E2B-compatible API is not enabled on this provisioner (SANDPIT_E2B_TOKEN_SECRET is not set)",
    );
    return {
      middleware: (req, res, next) =>
        routeOf(req.url, req.headers, undefined) ? writeE2bError(res, off) : next(),
      upgrade: (req, socket) =>
        routeOf(req.url ?? "/", req.headers, undefined)
          ? Promise.resolve(endSocketE2b(socket, off))
          : undefined,
    };
  }
  const d: E2bDeps = { ...base, tokens: new EnvdTokens(e2b.tokenSecret) };
  const control = controlRouter(d);
  const handleError = e2bErrorHandler(log);
  const instances = new SandboxInstances({
    store: d.store,
    transport: d.transport,
    hostOf: domain ? (id, port) => `${port}-${id}.${domain}` : undefined,
  });

  /** The sandbox a data-plane request names, if it exists and may get traffic now. */
  const reachable = (id: string): Sandbox => {
    const s = d.store.getAnyTenant(id);
    if (!s || s.metadata.deletionTimestamp) throw notRunning(id);
    // As on E2B: a paused sandbox wakes on traffic only if it was created with autoResume.
    if (stateOf(s) === "paused" && !autoResumes(s)) throw notRunning(id, "is paused");
    return s;
  };

  const serveData = async (req: Request, res: Response, id: string, port: number, path: string) => {
    const s = reachable(id);
    // envd's /health is what the SDKs' isRunning() asks, and it is answered here without the
    // pod: what the cache shows is confirmed with the API server, since another replica may
    // have killed the sandbox a moment ago (as DeerFlow's status check is; one read per call).
    if (port === ENVD_PORT && requestUrl(path).pathname === "/health") {
      const live = await d.store.getLive(s.metadata.labels?.[LABEL.tenant] ?? "", id);
      if (!live || live.metadata.deletionTimestamp) throw notRunning(id);
    }
    if (port !== ENVD_PORT && port !== INTERPRETER_PORT) {
      await d.transport.forward(s, req, res, { kind: "port", port }, path);
      return;
    }
    const accessToken = d.tokens.forUid(s.metadata.uid!);
    const pathname = path.split("?")[0];
    const allowed =
      d.tokens.matches(s.metadata.uid!, header(req.headers["x-access-token"])) ||
      // The code interpreter SDKs send only the traffic token on their /contexts calls.
      (port === INTERPRETER_PORT &&
        d.tokens.matches(
          s.metadata.uid!,
          header(req.headers["e2b-traffic-access-token"]),
          "traffic",
        )) ||
      (pathname === "/health" && port === ENVD_PORT) ||
      (pathname === "/files" && filesSignatureValid(path, accessToken));
    if (!allowed)
      throw new ApiError("UNAUTHORIZED", "missing or invalid access token (X-Access-Token)");
    await serveEnvd(req, res, path, port, {
      sandboxId: s.metadata.name,
      instance: instances.for(s),
      accessToken,
      envdVersion: ENVD_VERSION,
    });
  };

  /** The one sandbox whose token made this signature (the URL names no sandbox). */
  const signedBy = (path: string): Sandbox => {
    const s = d.store
      .listAllTenants()
      .find((c) => filesSignatureValid(path, d.tokens.forUid(c.metadata.uid!)));
    if (!s) throw new ApiError("UNAUTHORIZED", "invalid or expired signature");
    return s;
  };

  const middleware = (req: Request, res: Response, next: NextFunction): void => {
    const r = routeOf(req.url, req.headers, domain);
    if (!r) return next();
    if (r.kind === "control") {
      req.url = r.path;
      control(req, res, (err?: unknown) =>
        handleError(err ?? new ApiError("NOT_FOUND", "no such route"), req, res, next),
      );
      return;
    }
    const served =
      r.kind === "refused"
        ? Promise.reject(r.error)
        : r.kind === "data"
          ? serveData(req, res, r.sandboxId, r.port, r.path)
          : Promise.resolve().then(() =>
              serveData(req, res, signedBy(r.path).metadata.name, ENVD_PORT, r.path),
            );
    served.catch((err: unknown) => {
      if (serverFault(err)) log.error({ err }, "E2B data-plane request failed");
      req.resume();
      writeE2bError(res, err);
    });
  };

  const upgrade = (
    req: IncomingMessage,
    socket: Duplex,
    head: Buffer,
  ): Promise<void> | undefined => {
    const r = routeOf(req.url ?? "/", req.headers, domain);
    if (!r) return undefined;
    const go = async () => {
      if (r.kind === "refused") throw r.error;
      if (r.kind !== "data" || r.port === ENVD_PORT || r.port === INTERPRETER_PORT)
        throw new ApiError("NOT_FOUND", "upgrades are proxied only to a sandbox's own ports");
      await d.transport.upgrade(reachable(r.sandboxId), req, socket, head, r.path, {
        kind: "port",
        port: r.port,
      });
    };
    return go().catch((err: unknown) => {
      if (serverFault(err)) log.error({ err }, "E2B upgrade failed");
      endSocketE2b(socket, err);
    });
  };

  return { middleware, upgrade };
}

const header = (v: string | string[] | undefined) => (Array.isArray(v) ? v[0] : v);

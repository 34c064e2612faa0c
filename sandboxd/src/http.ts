/**
 * What every sandboxd route needs from HTTP, over plain `node:http`: a route table (method and
 * path, `:name` segments), the request's path, query and params, bounded body readers (JSON, raw
 * bytes) and JSON answers. Nothing here knows a route; server.ts builds the table and answers
 * errors in the envelopes (protocol.ts, aio-envelope.ts).
 *
 * It keeps what sandboxd answered when it ran on express, on the wire: paths match without regard
 * to case and with or without one trailing slash; HEAD runs the GET route; a query is parsed as
 * `node:querystring` does (a repeated name is an array); JSON answers are `application/json;
 * charset=utf-8` with a weak ETag, and a GET whose If-None-Match names it is answered 304.
 */
import { createHash } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import { parse as parseQuery, type ParsedUrlQuery } from "node:querystring";
import { finished, type Readable, type Transform } from "node:stream";
import { SandboxdError, type ErrorCode } from "./wire.ts";

export type Method = "GET" | "POST" | "PUT" | "DELETE";

export interface Req extends IncomingMessage {
  /** The URL's path as sent (not decoded), without the query. */
  path: string;
  /** The query string, parsed by `node:querystring`. */
  query: ParsedUrlQuery;
  /** The route's `:name` segments, decoded. */
  params: Record<string, string>;
}
export type Res = ServerResponse<IncomingMessage>;
export type Handler = (req: Req, res: Res) => unknown;

export interface Route {
  method: Method;
  /** As registered: `/v1/processes/:pid/stdin`. */
  path: string;
  handler: Handler;
  pattern: RegExp;
  names: string[];
}

/**
 * The routes, in the order they were added; the first whose path and method match serves a
 * request. `list` is the whole table (tests enumerate it).
 */
export class Routes {
  readonly list: Route[] = [];

  get(path: string, handler: Handler): void {
    this.add("GET", path, handler);
  }
  post(path: string, handler: Handler): void {
    this.add("POST", path, handler);
  }
  put(path: string, handler: Handler): void {
    this.add("PUT", path, handler);
  }
  delete(path: string, handler: Handler): void {
    this.add("DELETE", path, handler);
  }

  add(method: Method, path: string, handler: Handler): void {
    const names: string[] = [];
    const source = path
      .replace(/[.*+?^${}()|[\]\\]/g, "\\$&")
      .replace(/:(\w+)/g, (_all, name: string) => {
        names.push(name);
        return "([^/]+)";
      });
    this.list.push({ method, path, handler, names, pattern: new RegExp(`^${source}/?$`, "i") });
  }

  /**
   * The route serving `method` on `path` and its decoded params, or undefined. A path that
   * matches a route's but has a param that does not decode is a 400 whatever the method.
   */
  find(method: string, path: string): { route: Route; params: Record<string, string> } | undefined {
    const wanted = method === "HEAD" ? "GET" : method;
    for (const route of this.list) {
      const match = route.pattern.exec(path);
      if (!match) continue;
      const params: Record<string, string> = {};
      route.names.forEach((name, i) => (params[name] = decodeParam(match[i + 1]!)));
      if (route.method === wanted) return { route, params };
    }
    return undefined;
  }
}

function decodeParam(value: string): string {
  try {
    return decodeURIComponent(value);
  } catch {
    throw new SandboxdError("INVALID_ARGUMENT", `Failed to decode param '${value}'`);
  }
}

/** Adds `path` and `query` to a request (`params` come with its route). */
export function prepare(incoming: IncomingMessage): Req {
  const req = incoming as Req;
  let url = req.url ?? "/";
  // An absolute-form target (`GET http://host/path`): its path is what routes see.
  if (!url.startsWith("/")) {
    try {
      const u = new URL(url);
      url = u.pathname + u.search;
    } catch {
      url = "/";
    }
  }
  const q = url.indexOf("?");
  req.path = q < 0 ? url : url.slice(0, q);
  req.query = q < 0 ? {} : parseQuery(url.slice(q + 1));
  req.params = {};
  return req;
}

/** An error answered with a status of its own rather than its code's (415). */
export class HttpError extends SandboxdError {
  readonly status: number;
  constructor(status: number, code: ErrorCode, message: string) {
    super(code, message);
    this.status = status;
  }
}

const tooLarge = () => new SandboxdError("PAYLOAD_TOO_LARGE", "request body is too large");

/** Whether the request carries bytes: a chunked body, or a length but 0 (as the provisioner). */
function hasBody(req: IncomingMessage): boolean {
  if (req.headers["transfer-encoding"] !== undefined) return true;
  const length = req.headers["content-length"];
  return length !== undefined && length !== "0";
}

/**
 * The request body, whole, refused past `limit` bytes (413): by its Content-Length before any of
 * it is read, else as it arrives. A gzip, deflate or br Content-Encoding is undone first (the
 * limit applies to the decoded bytes). Undefined when there is no body.
 */
export async function readRaw(req: IncomingMessage, limit: number): Promise<Buffer | undefined> {
  if (!hasBody(req)) return undefined;
  const encoding = (req.headers["content-encoding"] ?? "identity").toLowerCase();
  let source: Readable = req;
  let inflate: Transform | null = null;
  if (encoding === "identity") {
    if (Number(req.headers["content-length"]) > limit) {
      await drain(req);
      throw tooLarge();
    }
  } else {
    const zlib = process.getBuiltinModule("node:zlib");
    inflate =
      encoding === "gzip"
        ? zlib.createGunzip()
        : encoding === "deflate"
          ? zlib.createInflate()
          : encoding === "br"
            ? zlib.createBrotliDecompress()
            : null;
    if (!inflate)
      throw new SandboxdError("INVALID_ARGUMENT", `unsupported content encoding "${encoding}"`);
    const sink = inflate;
    req.pipe(sink);
    req.once("error", (err) => sink.destroy(err));
    source = sink;
  }
  const chunks: Buffer[] = [];
  let size = 0;
  try {
    await new Promise<void>((resolve, reject) => {
      source.on("data", (chunk: Buffer) => {
        size += chunk.length;
        if (size > limit) reject(tooLarge());
        else chunks.push(chunk);
      });
      source.once("end", resolve);
      source.once("error", reject);
      // Closed before its end (after it, this is a no-op): the client went away.
      source.once("close", () =>
        reject(Object.assign(new Error("aborted"), { code: "ECONNRESET" })),
      );
    });
  } catch (err) {
    source.removeAllListeners("data");
    if (inflate) {
      req.unpipe(inflate);
      inflate.destroy();
    }
    if (err instanceof SandboxdError) {
      await drain(req);
      throw err;
    }
    req.resume();
    // A client that hung up mid-body, or a body that does not inflate.
    if ((err as NodeJS.ErrnoException)?.code === "ECONNRESET") throw err;
    throw new SandboxdError("INVALID_ARGUMENT", "request body could not be read");
  }
  return Buffer.concat(chunks, size);
}

/**
 * Reads the rest of a body and drops it: a client that sends all of it before it reads (most do)
 * would otherwise find the connection closed under it and never see the answer.
 */
function drain(req: IncomingMessage): Promise<void> {
  return new Promise((resolve) => {
    req.resume();
    finished(req, () => resolve());
  });
}

/**
 * A JSON request body (an object or an array), refused past `limit` bytes (413), when it is not
 * JSON (400) or not declared `application/json` or `application/<x>+json` (415, as the
 * provisioner refuses it). Undefined when there is none or it is empty (the route's schema then
 * sees `{}`).
 */
export async function readJson(req: IncomingMessage, limit: number): Promise<unknown> {
  const type = req.headers["content-type"];
  const media = (type ?? "").split(";", 1)[0]!.trim().toLowerCase();
  const json = media === "application/json" || /^application\/[^/]+\+json$/.test(media);
  // A body of another type is refused before it is read; one without a type, once it is not empty.
  if (type !== undefined && !json && hasBody(req)) throw notJson(type);
  const charset = /;\s*charset\s*=\s*"?([^";\s]+)/i.exec(type ?? "")?.[1]?.toLowerCase() ?? "utf-8";
  if (charset !== "utf-8" && charset !== "utf-16le" && charset !== "utf-16be")
    throw new SandboxdError("INVALID_ARGUMENT", `unsupported charset "${charset.toUpperCase()}"`);
  const raw = await readRaw(req, limit);
  if (!raw?.length) return undefined;
  if (!json) throw notJson("none");
  // TextDecoder drops a byte order mark, as JSON.parse would not.
  const text = new TextDecoder(charset).decode(raw);
  const first = /\S/.exec(text)?.[0];
  if (first !== "{" && first !== "[")
    throw new SandboxdError("INVALID_ARGUMENT", "request body is not valid JSON");
  try {
    return JSON.parse(text) as unknown;
  } catch {
    throw new SandboxdError("INVALID_ARGUMENT", "request body is not valid JSON");
  }
}

/** The provisioner's words for the same refusal (provisioner/src/api/json-body.ts). */
const notJson = (type: string) =>
  new HttpError(415, "INVALID_ARGUMENT", `the body must be application/json, got ${type}`);

/** Answers `body` as JSON with `status`; a GET or HEAD whose If-None-Match names it gets 304. */
export function sendJson(res: Res, body: unknown, status = 200): void {
  const data = Buffer.from(JSON.stringify(body), "utf8");
  const etag = weakETag(data);
  res.statusCode = status;
  res.setHeader("Content-Type", "application/json; charset=utf-8");
  res.setHeader("Content-Length", String(data.length));
  res.setHeader("ETag", etag);
  if (fresh(res.req, status, etag)) {
    res.statusCode = 304;
    res.removeHeader("Content-Type");
    res.removeHeader("Content-Length");
    res.end();
    return;
  }
  if (res.req.method === "HEAD") res.end();
  else res.end(data);
}

/** An empty answer (204 and the like). */
export function sendEmpty(res: Res, status = 204): void {
  res.statusCode = status;
  res.end();
}

/** Starts a streamed answer: status 200 and its type, the headers sent now. */
export function startStream(
  res: Res,
  type: "application/x-ndjson" | "application/octet-stream",
): void {
  res.statusCode = 200;
  res.setHeader("Content-Type", type);
  res.flushHeaders();
}

/** The weak ETag express gave JSON answers: length in hex and a SHA-1 prefix. */
function weakETag(data: Buffer): string {
  const hash = createHash("sha1").update(data).digest("base64").slice(0, 27);
  return `W/"${data.length.toString(16)}-${hash}"`;
}

/** Whether the client's cached copy (If-None-Match) is still this answer. */
function fresh(req: IncomingMessage, status: number, etag: string): boolean {
  if (req.method !== "GET" && req.method !== "HEAD") return false;
  if (status < 200 || status >= 300) return false;
  const match = req.headers["if-none-match"];
  if (!match) return false;
  if (/(?:^|,)\s*no-cache\s*(?:,|$)/.test(req.headers["cache-control"] ?? "")) return false;
  if (match.trim() === "*") return true;
  const strong = (tag: string) => (tag.startsWith("W/") ? tag.slice(2) : tag);
  return match.split(",").some((tag) => strong(tag.trim()) === strong(etag));
}

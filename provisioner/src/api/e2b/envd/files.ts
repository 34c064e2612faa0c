/**
 * envd's REST `/files`: download (GET, the file's bytes) and upload (POST, multipart/form-data
 * or application/octet-stream, gzip-encoded or not), both streamed through the SandboxInstance's
 * `readStream`/`writeStream` so memory stays flat for any size; and the signed URLs of
 * `uploadUrl()`/`downloadUrl()`, whose signature stands in for the access token.
 */
import { createHash, timingSafeEqual } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import { posix } from "node:path";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { createGunzip } from "node:zlib";
import { isSandboxError } from "@sandpit/sdk/errors";
import type { SandboxInstance } from "@sandpit/sdk";
import { reportAs, toSandbox } from "./home.ts";
import { boundaryOf, MultipartError, readParts } from "./multipart.ts";

/** envd's REST errors: `{code, message}` with the HTTP status as code. */
export class RestError extends Error {
  readonly status: number;
  constructor(status: number, message: string) {
    super(message);
    this.status = status;
  }
}

export function sendRestError(res: ServerResponse, status: number, message: string): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const body = JSON.stringify({ code: status, message });
  res.writeHead(status, {
    "content-type": "application/json",
    "content-length": Buffer.byteLength(body),
  });
  res.end(body);
}

/** Sandpit's error codes as envd's REST statuses (the SDKs map 400/401/404/429/507 to classes). */
export function restStatus(err: unknown): number {
  if (err instanceof RestError) return err.status;
  if (err instanceof MultipartError) return 400;
  if (!isSandboxError(err)) return 500;
  const status: Record<string, number> = {
    NOT_FOUND: 404,
    INVALID_ARGUMENT: 400,
    CONFLICT: 400,
    UNAUTHORIZED: 401,
    CAPACITY_EXCEEDED: 507,
    RATE_LIMITED: 429,
    TIMEOUT: 504,
    CONNECTION_FAILED: 502,
  };
  return status[err.code] ?? 500;
}

/**
 * The signature E2B's SDKs put on a file URL: `v1_` + unpadded base64 of
 * SHA-256(`path:operation:username:accessToken[:expiration]`).
 */
function signature(
  path: string,
  operation: string,
  user: string,
  token: string,
  exp: string | null,
) {
  const raw = `${path}:${operation}:${user}:${token}${exp === null ? "" : `:${exp}`}`;
  return `v1_${createHash("sha256").update(raw).digest("base64").replace(/=+$/, "")}`;
}

function sameString(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

function signatureMatches(
  query: URLSearchParams,
  operation: "read" | "write",
  token: string,
): boolean {
  const given = query.get("signature");
  if (!given || !token) return false;
  const expected = signature(
    query.get("path") ?? "",
    operation,
    query.get("username") ?? "",
    token,
    query.get("signature_expiration"),
  );
  return sameString(given, expected);
}

/**
 * A request's path and query as a URL. Joined to the origin, never resolved against it: a path
 * such as `//%3C` would otherwise be read as a host, and the parse would throw.
 */
export function requestUrl(path: string): URL {
  return new URL(`http://envd${path.startsWith("/") ? "" : "/"}${path}`);
}

/**
 * Whether a signed /files URL's signature was made with this token (for either operation; the
 * request's method picks the one that must match when it is served). Expiry is not checked
 * here, so an expired URL still finds its sandbox and gets envd's "expired" error.
 */
export function filesSignatureValid(path: string, accessToken: string): boolean {
  const query = requestUrl(path).searchParams;
  return (
    signatureMatches(query, "read", accessToken) || signatureMatches(query, "write", accessToken)
  );
}

/** Checks a signed request: the signature for this method's operation, and its expiry. */
export function checkSignature(req: IncomingMessage, query: URLSearchParams, token: string): void {
  const operation = req.method === "POST" ? "write" : "read";
  if (!signatureMatches(query, operation, token)) throw new RestError(401, "invalid signature");
  const exp = query.get("signature_expiration");
  if (exp !== null) {
    const at = Number(exp);
    if (!Number.isInteger(at)) throw new RestError(400, "invalid signature expiration");
    if (at < Math.floor(Date.now() / 1000))
      throw new RestError(401, "signature is already expired");
  }
}

function pathParam(query: URLSearchParams): string {
  const path = query.get("path");
  if (!path) throw new RestError(400, "the path query parameter is required");
  return path;
}

export async function serveFiles(
  req: IncomingMessage,
  res: ServerResponse,
  query: URLSearchParams,
  instance: SandboxInstance,
): Promise<void> {
  if (req.method === "GET") return download(res, query, instance);
  if (req.method === "POST") return upload(req, res, query, instance);
  throw new RestError(405, `method ${req.method} is not allowed on /files`);
}

async function download(res: ServerResponse, query: URLSearchParams, instance: SandboxInstance) {
  const path = pathParam(query);
  let info;
  try {
    info = await instance.filesystem.stat(toSandbox(path));
  } catch (err) {
    if (isSandboxError(err, "NOT_FOUND")) throw new RestError(404, `path '${path}' does not exist`);
    throw err;
  }
  if (info.type === "dir") throw new RestError(400, `path '${path}' is a directory`);
  const abort = new AbortController();
  res.once("close", () => abort.abort());
  const body = await instance.filesystem.readStream(toSandbox(path), { signal: abort.signal });
  res.writeHead(200, {
    "content-type": "application/octet-stream",
    "content-length": String(info.size),
    "content-disposition": `attachment; filename=${JSON.stringify(posix.basename(info.path))}`,
  });
  await pipeline(Readable.fromWeb(body as never), res).catch(() => res.destroy());
}

async function upload(
  req: IncomingMessage,
  res: ServerResponse,
  query: URLSearchParams,
  instance: SandboxInstance,
) {
  const type = String(req.headers["content-type"] ?? "").toLowerCase();
  const encoding = String(req.headers["content-encoding"] ?? "identity").toLowerCase();
  if (encoding !== "identity" && encoding !== "gzip")
    throw new RestError(400, `unsupported content encoding ${JSON.stringify(encoding)}`);
  const body: Readable = encoding === "gzip" ? req.pipe(createGunzip()) : req;
  const abort = new AbortController();
  res.once("close", () => {
    if (!res.writableFinished) abort.abort();
  });
  const written: string[] = []; // as the caller named them
  const write = async (path: string, data: AsyncIterable<Uint8Array>) => {
    const existing = await instance.filesystem.stat(toSandbox(path)).catch(() => undefined);
    if (existing?.type === "dir") throw new RestError(400, `path '${path}' is a directory`);
    await instance.filesystem.writeStream(toSandbox(path), data, { signal: abort.signal });
    written.push(path);
  };
  if (type.startsWith("multipart/form-data")) {
    for await (const part of readParts(body, boundaryOf(type))) {
      if (part.name !== "file") continue;
      const path = query.get("path") || part.filename;
      if (!path) throw new RestError(400, "a file part needs a path (query) or a filename");
      await write(path, part.body);
    }
    if (written.length === 0) throw new RestError(400, "the multipart body has no file part");
  } else if (type.startsWith("application/octet-stream")) {
    await write(pathParam(query), body);
  } else {
    throw new RestError(400, `unsupported content type ${JSON.stringify(type)}`);
  }
  const out = [];
  for (const path of written) {
    const info = await instance.filesystem.stat(toSandbox(path));
    out.push({ name: info.name, type: "file", path: reportAs(path)(info.path) });
  }
  const json = JSON.stringify(out);
  res.writeHead(200, {
    "content-type": "application/json",
    "content-length": Buffer.byteLength(json),
  });
  res.end(json);
}

/**
 * API keys: `Authorization: Bearer <key>` on the native API, `X-API-Key` on the DeerFlow one.
 * Keys are compared in constant time (as SHA-256 digests, so lengths do not leak either); the
 * key decides the tenant, and a tenant only ever sees its own sandboxes.
 */
import { createHash, timingSafeEqual } from "node:crypto";
import type { IncomingHttpHeaders } from "node:http";
import type { NextFunction, Request, Response } from "express";
import { bearerCredential } from "@sandpit/sandboxd/protocol";
import type { ApiKey } from "../config.ts";
import { ApiError } from "./errors.ts";

const digest = (s: string) => createHash("sha256").update(s).digest();

export class KeyRing {
  readonly #keys: { digest: Buffer; key: ApiKey }[];
  constructor(keys: ApiKey[]) {
    this.#keys = keys.map((key) => ({ digest: digest(key.key), key }));
  }
  find(presented: string | undefined): ApiKey | undefined {
    if (!presented) return undefined;
    const d = digest(presented);
    let found: ApiKey | undefined;
    for (const k of this.#keys) if (timingSafeEqual(k.digest, d)) found = k.key; // no early exit
    return found;
  }
}

declare module "express-serve-static-core" {
  interface Request {
    apiKey?: ApiKey;
  }
}

/** The key a request presents, or the 401 every route answers without a known one. */
export function authenticate(
  ring: KeyRing,
  headers: IncomingHttpHeaders,
  from: "bearer" | "x-api-key",
): ApiKey {
  const raw =
    from === "bearer"
      ? bearerCredential(headers.authorization)
      : (headers["x-api-key"] as string | undefined)?.trim();
  const key = ring.find(raw);
  if (key) return key;
  const how = from === "bearer" ? "Authorization: Bearer <api key>" : "X-API-Key: <api key>";
  throw new ApiError("UNAUTHORIZED", raw ? "unknown API key" : `missing API key (${how})`);
}

export function requireKey(ring: KeyRing, from: "bearer" | "x-api-key") {
  return (req: Request, _res: Response, next: NextFunction) => {
    try {
      req.apiKey = authenticate(ring, req.headers, from);
      next();
    } catch (err) {
      next(err);
    }
  };
}

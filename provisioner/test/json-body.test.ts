/**
 * The JSON routes' body parser (provisioner/src/api/json-body.ts) behind a real HTTP server, with
 * the native and the E2B error handlers: a body that is not JSON is a 415 in the caller's error
 * shape, never taken as an empty body.
 */
import type { AddressInfo } from "node:net";
import type { Server } from "node:http";
import express, { type Request, type Response } from "express";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { errorHandler } from "../src/api/errors.ts";
import { e2bErrorHandler } from "../src/api/e2b/errors.ts";
import { jsonBody } from "../src/api/json-body.ts";

const log = { error: () => undefined, warn: () => undefined };
let server: Server;
let base: string;

beforeAll(async () => {
  const app = express();
  const echo = (req: Request, res: Response) => res.json({ body: req.body ?? null });
  app.post("/native", jsonBody(1024), echo);
  app.post("/e2b", jsonBody(1024), echo);
  app.use("/e2b", e2bErrorHandler(log));
  app.use(errorHandler(log));
  server = app.listen(0, "127.0.0.1");
  await new Promise((r) => server.once("listening", r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(() => new Promise((r) => server.close(r)));

const post = async (path: string, body?: string, type?: string) => {
  const res = await fetch(`${base}${path}`, {
    method: "POST",
    ...(body !== undefined ? { body } : {}),
    headers: type ? { "content-type": type } : {},
  });
  return { status: res.status, body: (await res.json()) as unknown };
};

describe("jsonBody", () => {
  test("JSON bodies are parsed, with or without a charset or a +json type", async () => {
    expect(await post("/native", '{"a":1}', "application/json")).toEqual({
      status: 200,
      body: { body: { a: 1 } },
    });
    expect((await post("/native", '{"a":1}', "application/json; charset=utf-8")).body).toEqual({
      body: { a: 1 },
    });
    expect((await post("/native", '{"a":1}', "application/merge-patch+json")).body).toEqual({
      body: { a: 1 },
    });
  });

  test("no body, or an empty one whatever its type, is no body", async () => {
    expect((await post("/native")).status).toBe(200);
    expect((await post("/native", "", "text/plain")).status).toBe(200);
  });

  test("a form, text or untyped body is a 415 naming what was sent, never an empty body", async () => {
    for (const type of [
      "application/x-www-form-urlencoded",
      "text/plain",
      "multipart/form-data; boundary=x",
    ]) {
      expect(await post("/native", '{"threadId":"t1"}', type)).toEqual({
        status: 415,
        body: {
          error: {
            code: "INVALID_ARGUMENT",
            message: `the body must be application/json, got ${type}`,
          },
        },
      });
    }
    // Node's fetch gives a string body text/plain; a raw client may send no type at all.
    const untyped = await new Promise<number>((resolve, reject) => {
      const url = new URL(`${base}/native`);
      import("node:http").then(({ request }) => {
        const req = request(
          { host: url.hostname, port: url.port, path: url.pathname, method: "POST" },
          (res) => {
            res.resume();
            resolve(res.statusCode ?? 0);
          },
        );
        req.on("error", reject);
        req.end('{"threadId":"t1"}');
      }, reject);
    });
    expect(untyped).toBe(415);
  });

  test("the E2B routes answer it in E2B's shape", async () => {
    expect(await post("/e2b", "templateID=base", "application/x-www-form-urlencoded")).toEqual({
      status: 415,
      body: {
        code: 415,
        message: "the body must be application/json, got application/x-www-form-urlencoded",
      },
    });
  });

  test("malformed JSON stays a 400", async () => {
    expect((await post("/native", "{", "application/json")).status).toBe(400);
  });
});

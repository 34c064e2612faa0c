/**
 * sandboxd's HTTP layer (src/http.ts, src/server.ts) in-process, over stand-ins for what the routes
 * drive: the route table (matching, params, HEAD, and the token on every route but the open ones),
 * the body readers' refusals (bad JSON 400, wrong type 415, too large 413) in both envelopes, and
 * the JSON answers (type, ETag, 304).
 */
import { createServer, request, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { gzipSync } from "node:zlib";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Activity } from "../src/activity.ts";
import { Routes } from "../src/http.ts";
import { isAioPath } from "../src/protocol.ts";
import { createApp, type App, type ServerOptions } from "../src/server.ts";
import { TokenGate } from "../src/token-gate.ts";

const TOKEN = "t".repeat(40);
const auth = { authorization: `Bearer ${TOKEN}` };
const JSON_TYPE = { "content-type": "application/json" };

interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
  json: () => Record<string, unknown>;
}

/** Stand-ins: the command route echoes its parsed body, stat its path; nothing else is reached. */
function options(open: boolean): ServerOptions {
  const activity = new Activity();
  const jail = {
    resolve: (p: unknown) => ({ virtual: String(p) }),
    stat: async (p: { virtual: string }) => ({ path: p.virtual }),
  };
  const executor = { runCommand: async (body: unknown) => ({ echo: body }) };
  return {
    jail,
    executor,
    gate: new TokenGate(TOKEN),
    logger: pino({ level: "silent" }),
    terminals: {},
    contexts: {},
    processes: {},
    activity,
    onDrained: () => undefined,
    aio: { files: jail, sessions: {}, open },
  } as unknown as ServerOptions;
}

async function serve(app: App): Promise<{ server: Server; port: number }> {
  const server = createServer(app.handle);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { server, port: (server.address() as AddressInfo).port };
}

function call(
  port: number,
  method: string,
  path: string,
  headers: Record<string, string> = {},
  body?: string | Buffer,
  o: { chunked?: boolean } = {},
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const h = { ...headers };
    if (body !== undefined && !o.chunked) h["content-length"] = String(Buffer.byteLength(body));
    const req = request({ host: "127.0.0.1", port, method, path, headers: h }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => {
        const text = Buffer.concat(chunks).toString("utf8");
        resolve({
          status: res.statusCode ?? 0,
          headers: res.headers,
          text,
          json: () => JSON.parse(text) as Record<string, unknown>,
        });
      });
    });
    req.on("error", reject);
    if (body === undefined) return void req.end();
    if (o.chunked) {
      const b = Buffer.from(body);
      req.write(b.subarray(0, 1));
      req.end(b.subarray(1));
    } else req.end(body);
  });
}

/** A route's path with every `:param` filled in. */
const concrete = (path: string) => path.replace(/:\w+/g, "1");

describe("Routes", () => {
  const r = new Routes();
  const seen: string[] = [];
  r.get("/v1/things", () => seen.push("list"));
  r.get("/v1/things/:id", () => seen.push("one"));
  r.post("/v1/things/:id/do", () => seen.push("do"));

  it("matches without regard to case, with one trailing slash, and nothing else", () => {
    expect(r.find("GET", "/v1/things")?.route.path).toBe("/v1/things");
    expect(r.find("GET", "/V1/THINGS/")?.route.path).toBe("/v1/things");
    expect(r.find("GET", "/v1/things//")).toBeUndefined();
    expect(r.find("GET", "/v1/thingsx")).toBeUndefined();
    expect(r.find("GET", "/v1/things/a/b")).toBeUndefined();
  });

  it("decodes params, keeps their case, and refuses one that does not decode", () => {
    expect(r.find("GET", "/v1/things/A%20b")?.params).toEqual({ id: "A b" });
    expect(r.find("POST", "/v1/things/x/do/")?.params).toEqual({ id: "x" });
    expect(() => r.find("DELETE", "/v1/things/%E0")).toThrow("Failed to decode param '%E0'");
  });

  it("serves HEAD with the GET route and no other method with another's", () => {
    expect(r.find("HEAD", "/v1/things/1")?.route.path).toBe("/v1/things/:id");
    expect(r.find("POST", "/v1/things/1")).toBeUndefined();
    expect(r.find("GET", "/v1/things/1/do")).toBeUndefined();
  });
});

describe("sandboxd's route table", () => {
  let app: App;
  let server: Server;
  let port: number;
  beforeAll(async () => {
    app = createApp(options(false));
    ({ server, port } = await serve(app));
  });
  afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

  it("is open on /healthz and /readyz alone", () => {
    expect(app.open.list.map((r) => `${r.method} ${r.path}`)).toEqual([
      "GET /healthz",
      "GET /readyz",
    ]);
    // The table is the whole API: the native, file, terminal, context, process and AIO routes.
    const paths = new Set(app.routes.list.map((r) => r.path));
    for (const p of ["/v1/commands/run", "/v1/files", "/v1/pty/:pid", "/v1/contexts/:id/execute"])
      expect(paths).toContain(p);
    for (const p of ["/v1/init", "/v1/drain", "/v1/packages/install", "/v1/code/execute"])
      expect(paths).toContain(p);
    for (const p of ["/v1/processes/:pid/stdin", "/v1/shell/exec", "/v1/bash/exec", "/v1/sandbox"])
      expect(paths).toContain(p);
    expect(app.routes.list.length).toBeGreaterThan(50);
  });

  it("answers 401 on every other route without the token, in the route's envelope", async () => {
    for (const route of app.routes.list) {
      for (const headers of [{}, { authorization: "Bearer wrong" }] as Record<string, string>[]) {
        const res = await call(port, route.method, concrete(route.path), headers);
        const what = `${route.method} ${route.path}`;
        expect(res.status, what).toBe(401);
        const body = res.json();
        if (isAioPath(route.path)) expect(body, what).toMatchObject({ success: false });
        expect(body.error, what).toEqual({
          code: "UNAUTHORIZED",
          message: "missing or wrong bearer token",
        });
      }
    }
  });

  it("opens the AIO routes alone with SANDBOXD_AIO_NO_AUTH", async () => {
    const openApp = createApp(options(true));
    const s = await serve(openApp);
    try {
      for (const route of openApp.routes.list.filter((r) => !isAioPath(r.path))) {
        const res = await call(s.port, route.method, concrete(route.path));
        expect(res.status, `${route.method} ${route.path}`).toBe(401);
      }
      // An AIO route is served without a token: here its body is refused, not the caller.
      const res = await call(s.port, "POST", "/v1/shell/view", JSON_TYPE, "{");
      expect(res.status).toBe(400);
    } finally {
      await new Promise<void>((resolve) => s.server.close(() => resolve()));
    }
  });
});

describe("requests and answers", () => {
  let server: Server;
  let port: number;
  beforeAll(async () => {
    ({ server, port } = await serve(createApp(options(false))));
  });
  afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

  const run = (headers: Record<string, string>, body?: string | Buffer, chunked = false) =>
    call(port, "POST", "/v1/commands/run", { ...auth, ...headers }, body, { chunked });

  it("reads a JSON body: plain, chunked, gzip, with a charset or a byte order mark", async () => {
    const cases: [Record<string, string>, string | Buffer, boolean][] = [
      [JSON_TYPE, '{"command":"a"}', false],
      [JSON_TYPE, '{"command":"a"}', true],
      [{ ...JSON_TYPE, "content-encoding": "gzip" }, gzipSync('{"command":"a"}'), false],
      [{ "content-type": "Application/JSON; charset=UTF-8" }, '{"command":"a"}', false],
      [JSON_TYPE, '\ufeff {"command":"a"}', false],
      [{ "content-type": "application/vnd.sandpit+json" }, '{"command":"a"}', false],
    ];
    for (const [headers, body, chunked] of cases) {
      const res = await run(headers, body, chunked);
      expect(res.status, JSON.stringify(headers)).toBe(200);
      expect(res.json()).toEqual({ echo: { command: "a" } });
    }
  });

  it("answers bad JSON with 400, a wrong type with 415, too much with 413", async () => {
    const big = JSON.stringify({ command: "x".repeat(5 * 1024 * 1024) });
    const cases: [string, Record<string, string>, string, boolean, number, string][] = [
      ["bad JSON", JSON_TYPE, '{"command":', false, 400, "request body is not valid JSON"],
      ["a JSON string", JSON_TYPE, '"ls"', false, 400, "request body is not valid JSON"],
      ["text/plain", { "content-type": "text/plain" }, "{}", false, 415, "application/json"],
      ["no type", {}, '{"command":"a"}', false, 415, "application/json"],
      [
        "a charset",
        { "content-type": "application/json; charset=latin1" },
        "{}",
        false,
        400,
        "LATIN1",
      ],
      ["an encoding", { ...JSON_TYPE, "content-encoding": "zz" }, "{}", false, 400, '"zz"'],
      ["too large", JSON_TYPE, big, false, 413, "request body is too large"],
      ["too large, chunked", JSON_TYPE, big, true, 413, "request body is too large"],
    ];
    for (const [name, headers, body, chunked, status, message] of cases) {
      const res = await run(headers, body, chunked);
      expect(res.status, name).toBe(status);
      expect(res.headers["content-type"], name).toBe("application/json; charset=utf-8");
      const error = res.json().error as { code: string; message: string };
      expect(error.code, name).toBe(status === 413 ? "PAYLOAD_TOO_LARGE" : "INVALID_ARGUMENT");
      expect(error.message, name).toContain(message);
    }
  });

  it("takes no body, or an empty one of any type, as an empty object", async () => {
    const empty = [
      await run({}),
      await run(JSON_TYPE, ""),
      await run({}, "", true),
      await run({ "content-type": "text/plain" }, ""),
    ];
    for (const res of empty) {
      expect(res.status).toBe(400);
      expect((res.json().error as { message: string }).message).toMatch(/^command: /);
    }
  });

  it("survives a client that hangs up mid-body", async () => {
    for (const path of ["/v1/commands/run", "/v1/processes/1/stdin"]) {
      await new Promise<void>((resolve) => {
        const req = request({
          host: "127.0.0.1",
          port,
          method: "POST",
          path,
          headers: { ...auth, ...JSON_TYPE, "content-length": "1000" },
        });
        req.on("error", () => resolve());
        req.write('{"command":', () => setTimeout(() => req.destroy(), 50));
      });
    }
    expect((await call(port, "GET", "/healthz")).status).toBe(200);
  });

  it("answers AIO routes' refusals in AIO's envelope", async () => {
    const cases: [string, Record<string, string>, string, number][] = [
      ["/v1/shell/view", JSON_TYPE, "{", 400],
      ["/v1/shell/view", { "content-type": "text/plain" }, '{"id":"x"}', 415],
      ["/v1/shell/exec", JSON_TYPE, JSON.stringify({ command: "x".repeat(5 << 20) }), 413],
      ["/v1/shell/nope", JSON_TYPE, "{}", 404],
    ];
    for (const [path, headers, body, status] of cases) {
      const res = await call(port, "POST", path, { ...auth, ...headers }, body);
      expect(res.status, path).toBe(status);
      const env = res.json();
      expect(env).toMatchObject({ success: false, data: null, message: expect.any(String) });
      expect(env.error).toMatchObject({ message: env.message });
    }
  });

  it("answers an unknown route, and a known path with another method, 404 in the envelope", async () => {
    for (const [method, path] of [
      ["GET", "/v1/nope"],
      ["PUT", "/v1/commands/run"],
      ["GET", "/v1/commands/run"],
      ["OPTIONS", "/v1/contexts"],
      ["POST", "/healthz"],
      ["GET", "/v1/files/stat//"],
    ] as const) {
      const res = await call(port, method, path, auth);
      expect(res.status, `${method} ${path}`).toBe(404);
      expect(res.json()).toEqual({ error: { code: "NOT_FOUND", message: "no such route" } });
    }
    // Without the token the token is what is missing, whether or not the route exists.
    expect((await call(port, "PUT", "/v1/commands/run")).status).toBe(401);
    expect((await call(port, "GET", "/v1/nope")).status).toBe(401);
  });

  it("refuses a param that does not decode with 400", async () => {
    const res = await call(port, "DELETE", "/v1/contexts/%E0", auth);
    expect(res.status).toBe(400);
    expect(res.json()).toEqual({
      error: { code: "INVALID_ARGUMENT", message: "Failed to decode param '%E0'" },
    });
  });

  it("answers JSON with a weak ETag, HEAD without the body, and 304 to a matching If-None-Match", async () => {
    const path = "/v1/files/stat?path=a+b&x=1";
    const res = await call(port, "GET", path, auth);
    expect(res.status).toBe(200);
    expect(res.json()).toEqual({ path: "a b" });
    expect(res.headers["content-type"]).toBe("application/json; charset=utf-8");
    expect(res.headers["content-length"]).toBe(String(res.text.length));
    const etag = res.headers.etag as string;
    expect(etag).toMatch(/^W\/"[0-9a-f]+-[A-Za-z0-9+/]{27}"$/);

    const head = await call(port, "HEAD", path, auth);
    expect([head.status, head.text, head.headers["content-length"]]).toEqual([
      200,
      "",
      res.headers["content-length"],
    ]);

    for (const match of [etag, etag.slice(2), `"other", ${etag}`, "*"]) {
      const again = await call(port, "GET", path, { ...auth, "if-none-match": match });
      expect([again.status, again.text, again.headers.etag], match).toEqual([304, "", etag]);
    }
    const stale = await call(port, "GET", path, { ...auth, "if-none-match": '"other"' });
    expect(stale.status).toBe(200);
    const noCache = await call(port, "GET", path, {
      ...auth,
      "if-none-match": etag,
      "cache-control": "no-cache",
    });
    expect(noCache.status).toBe(200);
  });

  it("leaves /healthz open, any case, with a trailing slash", async () => {
    for (const path of ["/healthz", "/HEALTHZ", "/healthz/"]) {
      const res = await call(port, "GET", path);
      expect(res.status, path).toBe(200);
      expect(res.json()).toMatchObject({ ok: true });
    }
  });
});

/**
 * Every route in sandboxd's route table needs the bearer token, /healthz alone excepted: read
 * from the app itself, so a route added later (before the token check, say) is caught here
 * without anyone listing it.
 */
import { randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import type { RequestListener } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pino } from "pino";
import { expect, it } from "vitest";
import { readSettings, startSandboxd } from "../src/index.ts";

/** The parts of Express's router this test reads. */
interface Layer {
  route?: { path: string; methods: Record<string, boolean> };
  handle?: { stack?: Layer[] };
}

function routesOf(stack: Layer[]): { method: string; path: string }[] {
  return stack.flatMap((layer) =>
    layer.route
      ? Object.keys(layer.route.methods).map((method) => ({ method, path: layer.route!.path }))
      : layer.handle?.stack
        ? routesOf(layer.handle.stack)
        : [],
  );
}

it("answers 401 on every route of its table but /healthz, without the token or with a wrong one", async () => {
  const root = await mkdtemp(join(tmpdir(), "sandboxd-routes-"));
  const token = randomBytes(32).toString("hex");
  const s = await startSandboxd({
    settings: readSettings({ SANDBOXD_LISTEN: "127.0.0.1:0", SANDBOXD_ROOT: root }),
    token,
    logger: pino({ level: "silent" }),
    env: process.env,
  });
  try {
    const app = s.server.listeners("request")[0] as RequestListener & {
      router: { stack: Layer[] };
    };
    const routes = routesOf(app.router.stack);
    expect(routes.length).toBeGreaterThan(50);
    expect(routes).toContainEqual({ method: "post", path: "/v1/drain" });
    for (const { method, path } of routes) {
      if (method === "get" && path === "/healthz") continue;
      const url = `http://${s.address}${path.replace(/:\w+/g, "1")}`;
      for (const authorization of [undefined, `Bearer ${"0".repeat(64)}`]) {
        const res = await fetch(url, {
          method: method.toUpperCase(),
          headers: {
            "content-type": "application/json",
            ...(authorization ? { authorization } : {}),
          },
          ...(method === "get" || method === "delete" ? {} : { body: "{}" }),
        });
        await res.body?.cancel();
        expect(res.status, `${method.toUpperCase()} ${path}`).toBe(401);
      }
    }
    // The control: with the token the same table answers otherwise.
    const ok = await fetch(`http://${s.address}/v1/files/stat?path=.`, {
      headers: { authorization: `Bearer ${token}` },
    });
    expect(ok.status).toBe(200);
  } finally {
    await s.close();
    await rm(root, { recursive: true, force: true });
  }
});

/**
 * sandboxd's terminals on a real process: create, the WebSocket (bytes both ways, resize, exit
 * status, replay on re-attach), input and resize over HTTP, kill of the whole session, limits,
 * idle reaping, and bad input (sizes, control frames, pids, tokens) answered clearly.
 */
import { readdir, readFile } from "node:fs/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import WebSocket from "ws";
import { json, startSandboxd, type TestSandboxd } from "./helpers.ts";

let d: TestSandboxd;
beforeAll(async () => {
  d = await startSandboxd({ SANDBOXD_MAX_TERMINALS: "3", SANDBOXD_TERMINAL_IDLE_SECONDS: "2" });
});
afterAll(async () => {
  await d?.stop();
});

async function create(body: Record<string, unknown> = {}): Promise<number> {
  const res = await d.call("/v1/pty", json({ cols: 80, rows: 24, ...body }));
  expect(res.status, await res.clone().text()).toBe(201);
  return ((await res.json()) as { pid: number }).pid;
}

/** A WebSocket client of one terminal: everything it received, and helpers to wait on it. */
class Client {
  readonly ws: WebSocket;
  output = "";
  exit: number | undefined;
  closed: Promise<{ code: number; reason: string }>;
  private readonly opened: Promise<void>;

  constructor(pid: number, token = d.token, query = "") {
    this.ws = new WebSocket(`${d.url.replace("http", "ws")}/v1/pty/${pid}/connect${query}`, {
      headers: { authorization: `Bearer ${token}` },
    });
    this.opened = new Promise((resolve, reject) => {
      this.ws.once("open", () => resolve());
      this.ws.once("error", reject);
    });
    this.ws.on("message", (data: Buffer, binary: boolean) => {
      if (binary) this.output += data.toString("utf8");
      else this.exit = (JSON.parse(data.toString()) as { exitCode: number }).exitCode;
    });
    this.closed = new Promise((resolve) =>
      this.ws.once("close", (code, reason) => resolve({ code, reason: reason.toString() })),
    );
  }

  async type(text: string): Promise<void> {
    await this.opened;
    this.ws.send(Buffer.from(text), { binary: true });
  }

  async control(message: unknown): Promise<void> {
    await this.opened;
    this.ws.send(typeof message === "string" ? message : JSON.stringify(message));
  }

  async waitFor(re: RegExp, ms = 10_000): Promise<string> {
    const until = Date.now() + ms;
    while (!re.test(this.output)) {
      if (Date.now() > until) throw new Error(`no ${re} in ${JSON.stringify(this.output)}`);
      await new Promise((r) => setTimeout(r, 20));
    }
    return this.output;
  }
}

/** Live processes whose session is `sid` (the terminal's). */
async function sessionMembers(sid: number): Promise<number[]> {
  const out: number[] = [];
  for (const name of await readdir("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    const stat = await readFile(`/proc/${name}/stat`, "utf8").catch(() => "");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    if (Number(fields[3]) === sid && fields[0] !== "Z") out.push(Number(name));
  }
  return out;
}

describe("terminals", () => {
  it("runs a shell at the created size, resizes, and reports the exit status", async () => {
    const pid = await create({ cols: 91, rows: 17 });
    const c = new Client(pid);
    await c.type("stty size; echo $TERM\r");
    await c.waitFor(/17 91\r?\n.*xterm-256color/s);
    await c.control({ type: "resize", cols: 120, rows: 40 });
    await c.type("stty size\r");
    await c.waitFor(/40 120/);
    await c.type("exit 3\r");
    expect(await c.closed).toEqual({ code: 1000, reason: "exited" });
    expect(c.exit).toBe(3);
    const info = (await (await d.call(`/v1/pty/${pid}`)).json()) as Record<string, unknown>;
    expect(info).toMatchObject({ pid, pty: true, command: "/bin/bash", exitCode: 3 });
    expect(info.cwd).toBe("/mnt/user-data/workspace");
  });

  it("is listed among the processes, marked pty, in the same shape", async () => {
    const before = Date.now();
    const pid = await create({ command: "cat" });
    const { processes } = (await (await d.call("/v1/processes")).json()) as {
      processes: Record<string, unknown>[];
    };
    const listed = processes.find((p) => p.pid === pid);
    expect(listed).toMatchObject({ pid, pty: true, command: "cat" });
    expect(listed!.startedAtMs).toBeGreaterThanOrEqual(before - 1000);
    await d.call(`/v1/pty/${pid}`, { method: "DELETE" });
  });

  it("replays recent output to a client that attaches later, which can still type", async () => {
    const pid = await create({ command: "cat" });
    await d.call(`/v1/pty/${pid}/input`, { method: "POST", body: "before-attach\r" });
    const first = new Client(pid);
    await first.waitFor(/before-attach/);
    first.ws.close();
    await first.closed;
    const second = new Client(pid);
    await second.waitFor(/before-attach/);
    await second.type("after-attach\r");
    await second.waitFor(/after-attach/);
    const res = await d.call(`/v1/pty/${pid}/resize`, json({ cols: 10, rows: 5 }));
    expect(res.status).toBe(204);
    await d.call(`/v1/pty/${pid}`, { method: "DELETE" });
    await second.closed;
  });

  it("with replay=false, sends a client new output only", async () => {
    const pid = await create({ command: "cat" });
    const first = new Client(pid);
    await first.type("before-attach\r");
    await first.waitFor(/before-attach/);
    const second = new Client(pid, d.token, "?replay=false");
    await second.type("after-attach\r");
    await second.waitFor(/after-attach/);
    expect(second.output).not.toContain("before-attach");
    const bad = new Client(pid, d.token, "?replay=maybe");
    expect(await bad.closed).toEqual({ code: 1008, reason: "replay must be true or false" });
    await d.call(`/v1/pty/${pid}`, { method: "DELETE" });
    await Promise.all([first.closed, second.closed]);
  });

  it("kills the whole session, jobs in their own groups included", async () => {
    const pid = await create();
    const c = new Client(pid);
    await c.type("sleep 1001 & sleep 1002 | cat & echo started\r");
    await c.waitFor(/started\r?\n/);
    await new Promise((r) => setTimeout(r, 200));
    expect((await sessionMembers(pid)).length).toBeGreaterThanOrEqual(4);
    const res = await d.call(`/v1/pty/${pid}`, { method: "DELETE" });
    expect(await res.json()).toEqual({ killed: true });
    expect(await sessionMembers(pid)).toEqual([]);
    expect((await c.closed).code).toBe(1000);
    expect(c.exit).toBe(137);
    const again = await d.call(`/v1/pty/${pid}`, { method: "DELETE" });
    expect(await again.json()).toEqual({ killed: false });
    const input = await d.call(`/v1/pty/${pid}/input`, { method: "POST", body: "x" });
    expect(input.status).toBe(409);
  });

  it("refuses more terminals than the limit with CAPACITY_EXCEEDED", async () => {
    const pids = [await create(), await create(), await create()];
    const res = await d.call("/v1/pty", json({ cols: 80, rows: 24 }));
    expect(res.status).toBe(429);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe(
      "CAPACITY_EXCEEDED",
    );
    for (const pid of pids) await d.call(`/v1/pty/${pid}`, { method: "DELETE" });
    await d.call(`/v1/pty/${await create()}`, { method: "DELETE" });
  });

  it("kills a terminal left without clients and input past the idle time", async () => {
    const pid = await create();
    const until = Date.now() + 10_000;
    let info: { exitCode?: number } = {};
    while (info.exitCode === undefined && Date.now() < until) {
      await new Promise((r) => setTimeout(r, 200));
      info = (await (await d.call(`/v1/pty/${pid}`)).json()) as { exitCode?: number };
    }
    expect(info.exitCode).toBe(137);
    expect(await sessionMembers(pid)).toEqual([]);
  });
});

describe("bad input", () => {
  it.each([
    [{ cols: 0, rows: 24 }, /cols/],
    [{ cols: 80, rows: 1001 }, /rows/],
    [{ cols: 1.5, rows: 24 }, /cols/],
    [{ cols: "80", rows: 24 }, /cols/],
    [{ rows: 24 }, /cols/],
    [{ cols: 80, rows: 24, cwd: "/etc" }, /outside/],
    [{ cols: 80, rows: 24, command: "" }, /command/],
    [{ cols: 80, rows: 24, extra: 1 }, /extra|unrecognized/i],
  ])("answers 400 INVALID_ARGUMENT to %j", async (body, message) => {
    const res = await d.call("/v1/pty", json(body));
    expect(res.status).toBe(400);
    const { error } = (await res.json()) as { error: { code: string; message: string } };
    expect(error.code).toBe("INVALID_ARGUMENT");
    expect(error.message).toMatch(message);
  });

  it("answers 400 to a bad size on resize and 404 to an unknown pid", async () => {
    const pid = await create({ command: "cat" });
    const bad = await d.call(`/v1/pty/${pid}/resize`, json({ cols: 0, rows: 5 }));
    expect(bad.status).toBe(400);
    expect((await d.call("/v1/pty/999999999")).status).toBe(404);
    expect((await d.call("/v1/pty/abc")).status).toBe(400);
    await d.call(`/v1/pty/${pid}`, { method: "DELETE" });
  });

  it.each([
    ["not JSON", "{oops", /not JSON/],
    ["an unknown type", { type: "dance" }, /type/],
    ["a size out of range", { type: "resize", cols: 5000, rows: 5 }, /cols/],
  ])("closes the WebSocket with 1008 on %s, and sandboxd stays up", async (_n, msg, reason) => {
    const pid = await create({ command: "cat" });
    const c = new Client(pid);
    await c.control(msg);
    const closed = await c.closed;
    expect(closed.code).toBe(1008);
    expect(closed.reason).toMatch(reason);
    expect((await fetch(`${d.url}/healthz`)).status).toBe(200);
    // The terminal itself is untouched.
    const again = new Client(pid);
    await again.type("still-here\r");
    await again.waitFor(/still-here/);
    await d.call(`/v1/pty/${pid}`, { method: "DELETE" });
  });

  it("closes with 4404 for an unknown pid; refuses a wrong token and unknown routes", async () => {
    const c = new Client(999999999);
    expect((await c.closed).code).toBe(4404);
    const status = (path: string, token: string) =>
      new Promise<number>((resolve) => {
        const ws = new WebSocket(`${d.url.replace("http", "ws")}${path}`, {
          headers: { authorization: `Bearer ${token}` },
        });
        ws.once("unexpected-response", (_req, res) => resolve(res.statusCode ?? 0));
        ws.once("open", () => resolve(101));
        ws.once("error", () => undefined);
      });
    expect(await status("/v1/pty/1/connect", "0".repeat(64))).toBe(401);
    expect(await status("/v1/nothing/connect", d.token)).toBe(404);
  });
});

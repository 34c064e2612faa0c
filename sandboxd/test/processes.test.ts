/**
 * sandboxd's background-process API on a real sandboxd: streams and offsets, the limits (process
 * count, output per process and in total, slow readers), what does and does not stop a process.
 */
import { randomUUID } from "node:crypto";
import { request } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { json, processesMatching, startSandboxd, type TestSandboxd } from "./helpers.ts";

type Event = Record<string, unknown> & { stream: string };

let d: TestSandboxd;
beforeAll(async () => {
  d = await startSandboxd({
    SANDBOXD_MAX_PROCESSES: "3",
    SANDBOXD_PROCESS_OUTPUT_BYTES: String(64 * 1024),
    SANDBOXD_PROCESS_OUTPUT_TOTAL_BYTES: String(100 * 1024),
  });
});
afterAll(async () => {
  await d?.stop();
});

async function start(body: Record<string, unknown>): Promise<number> {
  const res = await d.call("/v1/processes", json(body));
  expect(res.status).toBe(201);
  return ((await res.json()) as { pid: number }).pid;
}

/** The whole output stream of a process (it must exit), as events. */
async function output(pid: number, offset: number | "end" = 0): Promise<Event[]> {
  const res = await d.call(`/v1/processes/${pid}/output?offset=${offset}`);
  expect(res.headers.get("content-type")).toContain("application/x-ndjson");
  return (await res.text())
    .split("\n")
    .filter(Boolean)
    .map((l) => JSON.parse(l) as Event);
}

const signal = (pid: number, name: string) =>
  d.call(`/v1/processes/${pid}/signal`, json({ signal: name }));

async function exited(pid: number): Promise<void> {
  await until(
    async () =>
      ((await (await d.call(`/v1/processes/${pid}`)).json()) as Event).exitCode !== undefined,
    `process ${pid} exits`,
  );
}

async function until(check: () => boolean | Promise<boolean>, what: string): Promise<void> {
  const deadline = Date.now() + 15_000;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe("background processes", () => {
  it("start at once, and stream the output from the start with one request", async () => {
    const res = await d.call("/v1/processes", {
      ...json({ command: "echo out; echo err >&2; exit 4", tag: "t" }),
      headers: { "content-type": "application/json", accept: "application/x-ndjson" },
    });
    const events = (await res.text())
      .split("\n")
      .filter(Boolean)
      .map((l) => JSON.parse(l) as Event);
    expect(events[0]).toMatchObject({ stream: "attached", offset: 0, droppedBytes: 0 });
    const pid = events[0]!.pid as number;
    expect(events.slice(1, -1)).toEqual([
      { stream: "stdout", data: "out\n", offset: 0 },
      { stream: "stderr", data: "err\n", offset: 4 },
    ]);
    expect(events.at(-1)).toMatchObject({ stream: "exit", exitCode: 4, timedOut: false });
    const entry = await (await d.call(`/v1/processes/${pid}`)).json();
    expect(entry).toMatchObject({ pid, tag: "t", pty: false, exitCode: 4 });
  });

  it("replay from an offset, and report what the ring no longer holds", async () => {
    // 200 000 bytes through a 64 KiB ring.
    const pid = await start({ command: "head -c 200000 /dev/zero | tr '\\0' a; echo; echo end" });
    await exited(pid);
    const events = await output(pid);
    const attached = events[0]!;
    expect(attached.stream).toBe("attached");
    const dropped = attached.droppedBytes as number;
    expect(dropped).toBeGreaterThan(200_000 - 64 * 1024);
    const first = events[1]!;
    expect(first.offset).toBe(dropped);
    const data = events.filter((e) => e.stream === "stdout").map((e) => e.data as string);
    expect(dropped + data.join("").length).toBe(200_005);
    expect(data.join("").endsWith("a\nend\n")).toBe(true);
    // From an offset still held: exactly the bytes after it.
    const tail = await output(pid, 200_001);
    expect(tail.slice(1, -1)).toEqual([{ stream: "stdout", data: "end\n", offset: 200_001 }]);
  });

  it("follow from the end (new output only) with offset=end", async () => {
    const gate = `${d.root}/gate-${randomUUID()}`;
    // Started streamed: once its first line is read, the ring holds it.
    const started = await d.call("/v1/processes", {
      ...json({
        command: `echo before; while [ ! -e ${gate} ]; do sleep 0.05; done; echo after >&2`,
      }),
      headers: { "content-type": "application/json", accept: "application/x-ndjson" },
    });
    const reader = started.body!.getReader();
    let text = "";
    while (!text.includes("before")) text += new TextDecoder().decode((await reader.read()).value);
    await reader.cancel();
    const pid = (JSON.parse(text.split("\n")[0]!) as { pid: number }).pid;

    const pending = output(pid, "end");
    await new Promise((r) => setTimeout(r, 200));
    const { writeFile } = await import("node:fs/promises");
    await writeFile(gate, "");
    const events = await pending;
    expect(events[0]).toMatchObject({ stream: "attached", pid, offset: 7, droppedBytes: 0 });
    expect(events.slice(1, -1)).toEqual([{ stream: "stderr", data: "after\n", offset: 7 }]);
    expect(events.at(-1)).toMatchObject({ stream: "exit", exitCode: 0 });
    // Exited: from the end there is the exit line alone.
    expect((await output(pid, "end")).map((e) => e.stream)).toEqual(["attached", "exit"]);
  });

  it("tell a slow reader what it missed instead of buffering for it", async () => {
    const gate = `${d.root}/gate-${randomUUID()}`;
    const pid = await start({
      command: `while [ ! -e ${gate} ]; do sleep 0.05; done; head -c 40000000 /dev/zero | tr '\\0' b; echo`,
    });
    // A reader that takes nothing until the process has written everything.
    const url = new URL(`${d.url}/v1/processes/${pid}/output`);
    const res = await new Promise<import("node:http").IncomingMessage>((resolve, reject) =>
      request(url, { headers: { authorization: `Bearer ${d.token}` } }, resolve)
        .once("error", reject)
        .end(),
    );
    res.pause();
    const { writeFile } = await import("node:fs/promises");
    await writeFile(gate, "");
    await exited(pid);
    let text = "";
    res.setEncoding("utf8");
    res.on("data", (c: string) => (text += c));
    res.resume();
    await new Promise((r) => res.once("end", r));
    const events = text
      .split("\n")
      .filter(Boolean)
      .map((l) => JSON.parse(l) as Event);
    const dropped = events.filter((e) => e.stream === "dropped");
    expect(dropped.length).toBeGreaterThan(0);
    const got = events
      .filter((e) => e.stream === "stdout")
      .reduce((n, e) => n + (e.data as string).length, 0);
    const missed = dropped.reduce((n, e) => n + (e.bytes as number), 0);
    expect(got + missed).toBe(40_000_001);
    expect(got).toBeLessThan(40_000_001 / 2);
    expect(events.at(-1)).toMatchObject({ stream: "exit", exitCode: 0 });
  }, 60_000);

  it("bound the output of all processes together, exited ones' first", async () => {
    // 100 KiB in total: an exited process's 60 KB go before a running one's.
    const old = await start({ command: "head -c 60000 /dev/zero | tr '\\0' o" });
    await exited(old);
    const gate = `${d.root}/gate-${randomUUID()}`;
    const live = await start({
      command: `head -c 60000 /dev/zero | tr '\\0' n; while [ ! -e ${gate} ]; do sleep 0.05; done`,
    });
    await until(async () => {
      const [attached] = await output(old);
      return (attached!.droppedBytes as number) > 0;
    }, "the exited process's output is dropped");
    const { writeFile } = await import("node:fs/promises");
    await writeFile(gate, "");
    const events = await output(live);
    expect(events[0]!.droppedBytes).toBe(0);
  });

  it("take stdin in chunks until it is closed", async () => {
    const pid = await start({ command: "cat; echo eof", stdin: "first " });
    const stdin = (body: string) => d.call(`/v1/processes/${pid}/stdin`, { method: "POST", body });
    expect((await stdin("second ")).status).toBe(204);
    expect((await stdin("third")).status).toBe(204);
    expect((await d.call(`/v1/processes/${pid}/stdin/close`, { method: "POST" })).status).toBe(204);
    const events = await output(pid);
    const out = events.filter((e) => e.stream === "stdout").map((e) => e.data);
    expect(out.join("")).toBe("first second thirdeof\n");
    const late = await stdin("late");
    expect(late.status).toBe(409);
    expect(((await late.json()) as { error: { code: string } }).error.code).toBe("CONFLICT");
  });

  it("kill the group at the start's timeoutMs", async () => {
    const pid = await start({ command: "sleep 30", timeoutMs: 300 });
    const events = await output(pid);
    expect(events.at(-1)).toMatchObject({ stream: "exit", exitCode: 137, timedOut: true });
  });

  it(`refuse a start past SANDBOXD_MAX_PROCESSES with CAPACITY_EXCEEDED`, async () => {
    const pids = [];
    for (let i = 0; i < 3; i++) pids.push(await start({ command: "sleep 600" }));
    const res = await d.call("/v1/processes", json({ command: "sleep 600" }));
    expect(res.status).toBe(429);
    const { error } = (await res.json()) as { error: { code: string; message: string } };
    expect(error.code).toBe("CAPACITY_EXCEEDED");
    expect(error.message).toContain("at most 3 background processes");
    for (const pid of pids)
      expect(await (await signal(pid, "SIGKILL")).json()).toEqual({ delivered: true });
    for (const pid of pids) expect((await output(pid)).at(-1)).toMatchObject({ exitCode: 137 });
    expect(await (await signal(pids[0]!, "SIGKILL")).json()).toEqual({ delivered: false });
    expect(await start({ command: "true" })).toBeGreaterThan(0);
  });

  it("outlive a reader that disconnects", async () => {
    const marker = `m${randomUUID().slice(0, 8)}`;
    const pid = await start({ command: `sleep 600 && echo ${marker}` });
    const abort = new AbortController();
    const res = await d.call(`/v1/processes/${pid}/output`, { signal: abort.signal });
    expect(res.status).toBe(200);
    abort.abort();
    await new Promise((r) => setTimeout(r, 300));
    expect(await processesMatching(marker)).toHaveLength(1);
    expect(await (await signal(pid, "SIGTERM")).json()).toEqual({ delivered: true });
    expect((await output(pid)).at(-1)).toMatchObject({ exitCode: 143 });
  });

  it("answer bad input with 4xx envelopes", async () => {
    const cases: [string, RequestInit, number, string][] = [
      ["/v1/processes", json({ command: "" }), 400, "command is empty"],
      ["/v1/processes", json({ command: "true", bogus: 1 }), 400, "bogus"],
      ["/v1/processes", json({ command: "true", tag: "x".repeat(300) }), 400, "tag"],
      ["/v1/processes", json({ command: "true", cwd: "/etc" }), 400, "outside"],
      ["/v1/processes/0", {}, 400, "positive integer"],
      ["/v1/processes/12abc/output", {}, 400, "positive integer"],
      ["/v1/processes/2147483647", {}, 404, "no background process"],
      ["/v1/processes/2147483647/signal", json({ signal: "SIGTERM" }), 404, "no background"],
      ["/v1/processes/1/signal", json({ signal: "SIGSTOP" }), 400, "unknown signal"],
    ];
    for (const [path, init, status, message] of cases) {
      const res = await d.call(path, init);
      expect(res.status, path).toBe(status);
      expect(((await res.json()) as { error: { message: string } }).error.message).toContain(
        message,
      );
    }
    const pid = await start({ command: "true" });
    for (const offset of ["-1", "x", "1e3", "999999", "END", "start"]) {
      const res = await d.call(`/v1/processes/${pid}/output?offset=${offset}`);
      expect(res.status, offset).toBe(400);
    }
  });
});

describe("process lifetimes", () => {
  it("a one-shot command whose client goes away is killed (JSON answers too)", async () => {
    const marker = `m${randomUUID().slice(0, 8)}`;
    const abort = new AbortController();
    const pending = d
      .call("/v1/commands/run", {
        ...json({ command: `sleep 600 && echo ${marker}` }),
        signal: abort.signal,
      })
      .catch(() => undefined);
    await until(async () => (await processesMatching(marker)).length === 1, "it runs");
    abort.abort();
    await pending;
    await until(async () => (await processesMatching(marker)).length === 0, "it is killed");
  });

  it("sandboxd stopping (SIGTERM) kills every background group", async () => {
    const own = await startSandboxd();
    const marker = `m${randomUUID().slice(0, 8)}`;
    try {
      const res = await own.call(
        "/v1/processes",
        json({ command: `(sleep 600 && echo ${marker}) & sleep 600 && echo ${marker}` }),
      );
      expect(res.status).toBe(201);
      await until(async () => (await processesMatching(marker)).length >= 2, "they run");
    } finally {
      await own.stop();
    }
    await until(async () => (await processesMatching(marker)).length === 0, "none is left");
  });
});

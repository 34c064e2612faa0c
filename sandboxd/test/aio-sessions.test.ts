/** AIO shell sessions and async commands on a real sandboxd: state, timeouts, caps, bounds. */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { json, startSandboxd, type TestSandboxd } from "./helpers.ts";

let d: TestSandboxd;
beforeAll(async () => {
  d = await startSandboxd({ SANDBOXD_OUTPUT_CAP_BYTES: "100000" });
});
afterAll(async () => {
  await d?.stop();
});

type Envelope<T> = { success: boolean; message: string; data: T };
async function call<T>(path: string, body?: unknown, method = "POST") {
  const res = await d.call(path, body === undefined ? { method } : { ...json(body), method });
  return { status: res.status, env: (await res.json()) as Envelope<T> };
}
type Shell = { output: string; exit_code: number | null; status: string; session_id: string };
const sh = async (command: string, extra: Record<string, unknown> = {}) =>
  (await call<Shell>("/v1/shell/exec", { command, ...extra })).env.data;

describe("shell sessions", () => {
  it("keeps cwd, exported and plain variables between calls without an id (DeerFlow's calls)", async () => {
    await sh("mkdir -p proj/sub && cd proj/sub && export GREETING=hi && PLAIN=kept");
    const out = await sh('pwd; echo "$GREETING $PLAIN"');
    expect(out.output).toBe("/mnt/user-data/workspace/proj/sub\nhi kept\n");
    expect(out.exit_code).toBe(0);
  });

  it("keeps an activated virtualenv, and deactivate works", async () => {
    const s = "venv";
    const made = await sh("python3 -m venv --without-pip .venv && source .venv/bin/activate", {
      id: s,
    });
    expect(made.exit_code, made.output).toBe(0);
    const active = await sh('echo "$VIRTUAL_ENV"; command -v python', { id: s });
    expect(active.output).toBe(
      "/mnt/user-data/workspace/.venv\n/mnt/user-data/workspace/.venv/bin/python\n",
    );
    const off = await sh('deactivate; echo "[$VIRTUAL_ENV]"; command -v python', { id: s });
    expect(off.output).not.toContain(".venv");
  });

  it("keeps sessions apart by id, creates and closes them", async () => {
    const created = await call<{ session_id: string; working_dir: string }>(
      "/v1/shell/sessions/create",
      { id: "a", exec_dir: "/mnt/user-data/outputs" },
    );
    expect(created.env.data).toEqual({ session_id: "a", working_dir: "/mnt/user-data/outputs" });
    await sh("export WHO=a", { id: "a" });
    await sh("export WHO=b", { id: "b" });
    expect((await sh("echo $WHO; pwd", { id: "a" })).output).toBe("a\n/mnt/user-data/outputs\n");
    expect((await sh("echo $WHO", { id: "b" })).output).toBe("b\n");
    const listed = await call<{ sessions: Record<string, { working_dir: string }> }>(
      "/v1/shell/sessions",
      undefined,
      "GET",
    );
    expect(listed.env.data.sessions.a!.working_dir).toBe("/mnt/user-data/outputs");
    const closed = await call("/v1/shell/sessions/a", undefined, "DELETE");
    expect(closed.status).toBe(200);
    const gone = await call("/v1/shell/view", { id: "a" });
    expect(gone.status).toBe(404);
    expect(gone.env.success).toBe(false);
    // A closed id starts afresh.
    expect((await sh("echo [$WHO]", { id: "a" })).output).toBe("[]\n");
  });

  it("kills a command at hard_timeout and keeps the session's state", async () => {
    const s = "timeouts";
    await sh("cd /mnt/user-data/uploads && export KEEP=1", { id: s });
    const slow = await sh("sleep 30", { id: s, hard_timeout: 0.5 });
    expect(slow.status).toBe("hard_timeout");
    expect((await sh("pwd; echo $KEEP", { id: s })).output).toBe("/mnt/user-data/uploads\n1\n");
    // A builtin loop cannot be stopped without the shell: it is rebuilt from the saved state.
    const loop = await sh("while :; do :; done", { id: s, hard_timeout: 0.5 });
    expect(loop.status).toBe("hard_timeout");
    expect((await sh("pwd; echo $KEEP", { id: s })).output).toBe("/mnt/user-data/uploads\n1\n");
  });

  it("survives exit, never lets a command read the next one, and caps output", async () => {
    const s = "odd";
    await sh("cd /mnt/user-data/outputs", { id: s });
    expect((await sh("exit 3", { id: s })).exit_code).toBe(3);
    expect((await sh("pwd", { id: s })).output).toBe("/mnt/user-data/outputs\n");
    expect((await sh("cat; echo done", { id: s })).output).toBe("done\n");
    const big = await sh("head -c 300000 /dev/zero | tr '\\0' x; echo", {
      id: s,
      truncate: false,
    });
    expect(big.exit_code).toBe(0);
    expect(big.output.length).toBe(100000);
    expect((await sh("echo after", { id: s })).output).toBe("after\n");
  });

  it("runs async commands: view, wait, kill", async () => {
    const s = "bg";
    const started = await sh("echo start; sleep 0.5; echo end", { id: s, async_mode: true });
    expect(started.status).toBe("running");
    const waited = await call<{ status: string }>("/v1/shell/wait", { id: s, seconds: 10 });
    expect(waited.env.data.status).toBe("completed");
    const viewed = await call<Shell>("/v1/shell/view", { id: s });
    expect(viewed.env.data).toMatchObject({ output: "start\nend\n", status: "completed" });
    await sh("sleep 30", { id: s, async_mode: true });
    const killed = await call<{ status: string }>("/v1/shell/kill", { id: s });
    expect(killed.env.data.status).toBe("terminated");
    // A soft timeout answers `running` and lets the command finish.
    const soft = await sh("sleep 0.6; echo late", { id: s, timeout: 0.1 });
    expect(soft.status).toBe("running");
    await call("/v1/shell/wait", { id: s, seconds: 10 });
    expect((await call<Shell>("/v1/shell/view", { id: s })).env.data.output).toBe("late\n");
  });
});

describe("bash API: async commands polled by offsets", () => {
  it("polls a running command's output by byte offsets until it completes", async () => {
    const started = await call<{ session_id: string; command_id: string; status: string }>(
      "/v1/bash/exec",
      { command: "echo one; sleep 0.4; echo two >&2; sleep 0.4; echo three", async_mode: true },
    );
    expect(started.env.data.status).toBe("running");
    const { session_id, command_id } = started.env.data;
    let offset = 0;
    let stderrOffset = 0;
    let stdout = "";
    let stderr = "";
    let status = "running";
    for (let i = 0; i < 50 && status !== "completed"; i++) {
      const polled = await call<{
        stdout: string;
        stderr: string;
        offset: number;
        stderr_offset: number;
        command: { status: string; exit_code: number | null };
      }>("/v1/bash/output", {
        session_id,
        command_id,
        offset,
        stderr_offset: stderrOffset,
        wait: true,
        wait_timeout: 1,
      });
      stdout += polled.env.data.stdout;
      stderr += polled.env.data.stderr;
      offset = polled.env.data.offset;
      stderrOffset = polled.env.data.stderr_offset;
      status = polled.env.data.command.status;
    }
    expect({ stdout, stderr, status }).toEqual({
      stdout: "one\nthree\n",
      stderr: "two\n",
      status: "completed",
    });
  });

  it("keeps state in a named bash session and scopes per-command env to the command", async () => {
    await call("/v1/bash/sessions/create", { session_id: "b1" });
    await call("/v1/bash/exec", {
      session_id: "b1",
      command: "cd /mnt/user-data/outputs; export A=1",
      env: { SECRET: "s3" },
    });
    const next = await call<{ stdout: string }>("/v1/bash/exec", {
      session_id: "b1",
      command: 'pwd; echo "$A[$SECRET]"',
    });
    expect(next.env.data.stdout).toBe("/mnt/user-data/outputs\n1[]\n");
    const closed = await call("/v1/bash/sessions/b1/close");
    expect(closed.status).toBe(200);
  });

  it("kills an async command", async () => {
    const started = await call<{ session_id: string }>("/v1/bash/exec", {
      command: "sleep 30",
      async_mode: true,
    });
    const killed = await call<{ status: string }>("/v1/bash/kill", {
      session_id: started.env.data.session_id,
      signal: "SIGTERM",
    });
    expect(killed.env.data.status).toBe("killed");
    const bad = await call("/v1/bash/kill", { session_id: "nope" });
    expect(bad.status).toBe(404);
    expect(bad.env.success).toBe(false);
  });
});

describe("session bounds", () => {
  let small: TestSandboxd;
  beforeAll(async () => {
    small = await startSandboxd({
      SANDBOXD_AIO_MAX_SESSIONS: "2",
      SANDBOXD_AIO_SESSION_IDLE_SECONDS: "1",
    });
  });
  afterAll(async () => {
    await small?.stop();
  });

  it("refuses sessions past the bound with a clear 429, and closes idle ones", async () => {
    const create = (id: string) => small.call("/v1/shell/sessions/create", json({ id }));
    expect((await create("one")).status).toBe(200);
    expect((await create("two")).status).toBe(200);
    const third = await create("three");
    expect(third.status).toBe(429);
    const env = (await third.json()) as Envelope<null>;
    expect(env.success).toBe(false);
    expect(env.message).toContain("2 shell sessions are open");
    await new Promise((r) => setTimeout(r, 2500));
    expect((await create("three")).status).toBe(200);
    const stats = (await (await small.call("/v1/shell/sessions/stats")).json()) as Envelope<{
      total_sessions: number;
      max_sessions: number;
      session_timeout: number;
    }>;
    expect(stats.data).toMatchObject({ total_sessions: 1, max_sessions: 2, session_timeout: 1 });
  });
});

/**
 * AIO's shell and bash routes over persistent sessions (shell-sessions.ts), with the request and
 * response shapes of the `agent-sandbox` client DeerFlow pins. `/v1/shell/*` answers one combined
 * `output`; `/v1/bash/*` keeps stdout and stderr apart with byte offsets for polling. Both share
 * one set of sessions: an id names the same shell on either API.
 *
 * Timeouts follow AIO: `timeout` only bounds how long the request waits (then the answer says
 * `running` and the command goes on: poll it, wait for it or kill it); `hard_timeout` kills. A
 * command with no `hard_timeout` is killed after sandboxd's default command timeout when the
 * request waits for it, after a day when it was started with `async_mode`.
 */
import { randomUUID } from "node:crypto";
import type { Executor } from "./executor.ts";
import type { PathJail } from "./jail.ts";
import { DEFAULT_TIMEOUT_MS, SandboxdError } from "./wire.ts";
import {
  DEFAULT_SESSION,
  type CommandStatus,
  type SessionCommand,
  type ShellSession,
  type ShellSessions,
} from "./shell-sessions.ts";
import { body, MAX_SECONDS, ok, truncateMiddle, type JsonReader } from "./aio-envelope.ts";
import type { Routes } from "./http.ts";

const ASYNC_HARD_TIMEOUT_MS = MAX_SECONDS * 1000;
const SHELL_TRUNCATE = 30_000;
const BASH_MAX_OUTPUT = 50_000;
const DEFAULT_POLL_WAIT_S = 30;

function hardTimeoutMs(b: {
  hard_timeout?: number | null;
  async_mode?: boolean | null;
  timeout?: number | null;
}): number {
  if (b.hard_timeout) return b.hard_timeout * 1000;
  if (b.async_mode) return ASYNC_HARD_TIMEOUT_MS;
  return Math.max(DEFAULT_TIMEOUT_MS, (b.timeout ?? 0) * 1000);
}

/** An async command is answered once it runs, unless it waits behind another for long. */
async function started(cmd: SessionCommand): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([cmd.started, new Promise((r) => (timer = setTimeout(r, 1000)))]);
  clearTimeout(timer);
}

/** The shell API's names for a command's state. */
const SHELL_STATUS: Record<CommandStatus, string> = {
  pending: "running",
  running: "running",
  completed: "completed",
  timed_out: "hard_timeout",
  killed: "terminated",
};

export function shellRoutes(
  r: Routes,
  o: { files: PathJail; executor: Executor; sessions: ShellSessions; json: JsonReader },
): void {
  const { files, executor, sessions, json } = o;

  /** A working directory given by the client: an existing directory, as a host path. */
  async function dir(input: string | null | undefined): Promise<string | undefined> {
    if (!input) return undefined;
    const p = files.resolve(input);
    await (await files.openDir(p)).close();
    return files.hostPath(p);
  }
  const home = async () => (await dir(files.defaultDir))!;
  const virtualCwd = (s: ShellSession) => executor.virtualise(s.cwd);

  const text = (cmd: SessionCommand, stream: "stdout" | "stderr", from = 0) =>
    executor.virtualise(cmd[stream].from(from, cmd.finished).toString("utf8"));

  /**
   * Waits for a command as a synchronous request does: until it ends, until `softMs` passed, or
   * until it printed nothing for `quietMs`. Says which.
   */
  async function waitFor(
    cmd: SessionCommand,
    softMs: number | undefined,
    quietMs: number | undefined,
  ): Promise<"done" | "timeout" | "quiet"> {
    const deadline = softMs === undefined ? Infinity : Date.now() + softMs;
    for (;;) {
      if (cmd.finished) return "done";
      const now = Date.now();
      if (now >= deadline) return "timeout";
      const quietLeft = quietMs === undefined ? Infinity : cmd.lastOutputAt + quietMs - now;
      if (quietLeft <= 0) return "quiet";
      await cmd.changed(Math.min(deadline - now, quietLeft, 2 ** 31 - 1));
    }
  }

  function shellResult(s: ShellSession, cmd: SessionCommand, limit: number | null, quiet = false) {
    const full = text(cmd, "stdout");
    const output = limit === null ? full : truncateMiddle(full, limit);
    return {
      session_id: s.id,
      command: cmd.command,
      status: quiet && !cmd.finished ? "no_change_timeout" : SHELL_STATUS[cmd.status],
      output,
      exit_code: cmd.exitCode,
      console: [{ ps1: `${virtualCwd(s)} $`, command: cmd.command, output }],
    };
  }

  // ---- /v1/shell ----

  r.post("/v1/shell/exec", async (req, res) => {
    const b = await body("shellExec", req, json);
    const cwd = await dir(b.exec_dir);
    const s = sessions.open(b.id ?? DEFAULT_SESSION, {
      combined: true,
      cwd: cwd ?? (await home()),
    });
    const cmd = s.run(b.command, { cwd, hardTimeoutMs: hardTimeoutMs(b) });
    let outcome: "done" | "timeout" | "quiet" = "timeout";
    if (b.async_mode) await started(cmd);
    else {
      const quiet = b.no_change_timeout ?? s.noChangeTimeoutS;
      outcome = await waitFor(
        cmd,
        b.timeout ? b.timeout * 1000 : undefined,
        quiet ? quiet * 1000 : undefined,
      );
    }
    const limit =
      b.truncate === false ? null : typeof b.truncate === "number" ? b.truncate : SHELL_TRUNCATE;
    ok(res, shellResult(s, cmd, limit, outcome === "quiet"));
  });

  r.post("/v1/shell/view", async (req, res) => {
    const s = sessions.need((await body("shellId", req, json)).id);
    const cmd = s.latest;
    if (!cmd) {
      ok(res, { output: "", session_id: s.id, console: [], status: "completed", exit_code: null });
      return;
    }
    ok(res, shellResult(s, cmd, null));
  });

  r.post("/v1/shell/wait", async (req, res) => {
    const b = await body("shellWait", req, json);
    const s = sessions.need(b.id);
    const secs = Math.min(b.seconds ?? b.max_wait_seconds ?? 60, b.max_wait_seconds ?? Infinity);
    if (s.latest) await s.latest.settled(secs * 1000);
    ok(res, { status: s.latest ? SHELL_STATUS[s.latest.status] : "completed" });
  });

  r.post("/v1/shell/kill", async (req, res) => {
    const s = sessions.need((await body("shellId", req, json)).id);
    await s.kill("SIGKILL");
    const cmd = s.latest;
    ok(res, {
      status: cmd ? SHELL_STATUS[cmd.status] : "completed",
      exit_code: cmd?.exitCode ?? null,
      returncode: cmd?.exitCode ?? null,
    });
  });

  r.post("/v1/shell/write", async (req) => {
    await json(req);
    throw new SandboxdError(
      "INVALID_ARGUMENT",
      "sandboxd runs session commands with stdin from /dev/null: pipe input in the command instead",
    );
  });

  r.post("/v1/shell/sessions/create", async (req, res) => {
    const b = await body("shellCreate", req, json);
    const cwd = (await dir(b.exec_dir)) ?? (await home());
    const s = sessions.open(b.id ?? randomUUID(), { combined: true, cwd });
    if (b.no_change_timeout) s.noChangeTimeoutS = b.no_change_timeout;
    ok(res, { session_id: s.id, working_dir: virtualCwd(s) });
  });

  r.post("/v1/shell/sessions/update", async (req, res) => {
    const b = await body("shellUpdate", req, json);
    sessions.need(b.id).noChangeTimeoutS = b.no_change_timeout ?? undefined;
    ok(res, null, "session updated");
  });

  r.get("/v1/shell/sessions", (_req, res) => {
    const now = Date.now();
    const list = Object.fromEntries(
      sessions.list().map((s) => [
        s.id,
        {
          working_dir: virtualCwd(s),
          created_at: new Date(s.createdAt).toISOString(),
          last_used_at: new Date(s.lastUsedAt).toISOString(),
          age_seconds: Math.floor((now - s.createdAt) / 1000),
          status: s.busy ? "active" : "idle",
          current_command: s.busy ? (s.latest?.command ?? null) : null,
        },
      ]),
    );
    ok(res, { sessions: list });
  });

  r.get("/v1/shell/sessions/stats", (_req, res) => {
    const all = sessions.list();
    const active = all.filter((s) => s.busy).length;
    ok(res, {
      total_sessions: all.length,
      active_sessions: active,
      idle_sessions: all.length - active,
      max_sessions: sessions.max,
      session_timeout: sessions.idleSeconds,
      usage_ratio: all.length / sessions.max,
    });
  });

  r.delete("/v1/shell/sessions", async (_req, res) => {
    await sessions.closeAll();
    ok(res, null, "all sessions closed");
  });

  r.delete("/v1/shell/sessions/:id", async (req, res) => {
    const id = String(req.params.id);
    if (!(await sessions.close(id)))
      throw new SandboxdError("NOT_FOUND", `no shell session ${JSON.stringify(id)}`);
    ok(res, null, "session closed");
  });

  // ---- /v1/bash ----

  function bashResult(cmd: SessionCommand, max: number) {
    const cut = (t: string) => (max === 0 ? t : truncateMiddle(t, max));
    return {
      session_id: cmd.sessionId,
      command_id: cmd.id,
      command: cmd.command,
      status: cmd.status,
      stdout: cut(text(cmd, "stdout")),
      stderr: cut(text(cmd, "stderr")),
      exit_code: cmd.exitCode,
      offset: cmd.stdout.from(0, cmd.finished).length,
      stderr_offset: cmd.stderr.from(0, cmd.finished).length,
    };
  }

  function bashSessionInfo(s: ShellSession) {
    return {
      session_id: s.id,
      status: "ready",
      working_dir: virtualCwd(s),
      created_at: new Date(s.createdAt).toISOString(),
      last_used_at: new Date(s.lastUsedAt).toISOString(),
      current_command: s.busy ? (s.latest?.command ?? null) : null,
      command_count: s.commandCount,
    };
  }

  r.post("/v1/bash/exec", async (req, res) => {
    const b = await body("bashExec", req, json);
    const cwd = await dir(b.exec_dir);
    // Without a session id the command gets a shell of its own, closed when it ends: per-command
    // variables (DeerFlow's secrets) never outlive it.
    const ephemeral = !b.session_id;
    const id = b.session_id ?? randomUUID();
    const s = sessions.open(id, { combined: false, cwd: cwd ?? (await home()) });
    const env = Object.fromEntries(
      Object.entries(b.env ?? {}).filter((e): e is [string, string] => e[1] !== null),
    );
    const cmd = s.run(b.command, {
      cwd,
      env,
      hardTimeoutMs: hardTimeoutMs(b),
    });
    if (ephemeral) void cmd.done.then(() => sessions.close(id));
    if (b.async_mode) await started(cmd);
    else await waitFor(cmd, b.timeout ? b.timeout * 1000 : undefined, undefined);
    ok(res, bashResult(cmd, b.max_output_length ?? BASH_MAX_OUTPUT));
  });

  r.post("/v1/bash/output", async (req, res) => {
    const b = await body("bashOutput", req, json);
    const cmd = sessions.command(b.session_id, b.command_id ?? undefined);
    const offset = b.offset ?? 0;
    const errOffset = b.stderr_offset ?? 0;
    const fresh = () =>
      cmd.stdout.from(offset, cmd.finished).length > 0 ||
      cmd.stderr.from(errOffset, cmd.finished).length > 0;
    if (b.wait && !cmd.finished && !fresh()) {
      await cmd.changed((b.wait_timeout ?? DEFAULT_POLL_WAIT_S) * 1000);
    }
    const out = cmd.stdout.from(offset, cmd.finished);
    const err = cmd.stderr.from(errOffset, cmd.finished);
    ok(res, {
      session_id: cmd.sessionId,
      stdout: executor.virtualise(out.toString("utf8")),
      stderr: executor.virtualise(err.toString("utf8")),
      offset: Math.min(offset, cmd.stdout.kept) + out.length,
      stderr_offset: Math.min(errOffset, cmd.stderr.kept) + err.length,
      command: {
        command_id: cmd.id,
        command: cmd.command,
        status: cmd.status,
        exit_code: cmd.exitCode,
      },
    });
  });

  r.post("/v1/bash/kill", async (req, res) => {
    const b = await body("bashKill", req, json);
    const s = sessions.get(b.session_id);
    const cmd = sessions.command(b.session_id);
    if (s && !cmd.finished) await s.kill(b.signal ?? "SIGTERM");
    ok(
      res,
      { session_id: b.session_id, status: cmd.status, exit_code: cmd.exitCode },
      "command killed",
    );
  });

  r.post("/v1/bash/write", async (req) => {
    await json(req);
    throw new SandboxdError(
      "INVALID_ARGUMENT",
      "sandboxd runs session commands with stdin from /dev/null: pipe input in the command instead",
    );
  });

  r.get("/v1/bash/sessions", (_req, res) => {
    ok(res, sessions.list().map(bashSessionInfo));
  });

  r.post("/v1/bash/sessions/create", async (req, res) => {
    const b = await body("bashCreate", req, json);
    if (b.snapshot_path) {
      throw new SandboxdError("INVALID_ARGUMENT", "snapshot_path is not supported by sandboxd");
    }
    const cwd = (await dir(b.exec_dir)) ?? (await home());
    ok(res, bashSessionInfo(sessions.open(b.session_id ?? randomUUID(), { combined: false, cwd })));
  });

  r.post("/v1/bash/sessions/:id/close", async (req, res) => {
    const id = String(req.params.id);
    if (!(await sessions.close(id)))
      throw new SandboxdError("NOT_FOUND", `no shell session ${JSON.stringify(id)}`);
    ok(res, null, "session closed");
  });
}

/**
 * E2B's code interpreter (port 49999): `POST /execute` streaming NDJSON, and `/contexts`, onto
 * the SandboxInstance's code contexts. `python` runs in a python context; `javascript` and
 * `typescript` in a typescript one (sandboxd's Node kernel runs both); `bash` cells are one-shot
 * commands (`bash -c`, no state kept between cells). Cells without a context run in the
 * language's default context, made on first use, so state is kept across them as on E2B.
 */
import { randomUUID } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { CodeResult, SandboxInstance, SandboxLanguage } from "@sandpit/sdk";
import { isSandboxError } from "@sandpit/sdk/errors";
import { RestError } from "./files.ts";
import { E2B_HOME, startDir, toSandbox } from "./home.ts";
import { stateOf, type InterpreterContext, type SandboxState } from "./state.ts";

const MAX_REQUEST_BYTES = 8 * 1024 * 1024;
const KERNELS: Record<string, SandboxLanguage | "bash"> = {
  python: "python",
  javascript: "typescript",
  typescript: "typescript",
  bash: "bash",
};

/** The code interpreter answers its errors as plain text (FastAPI's PlainTextResponse). */
export function sendText(res: ServerResponse, status: number, text: string): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  res.writeHead(status, { "content-type": "text/plain; charset=utf-8" });
  res.end(text);
}

function sendJson(res: ServerResponse, status: number, value: unknown): void {
  const body = JSON.stringify(value);
  res.writeHead(status, {
    "content-type": "application/json",
    "content-length": Buffer.byteLength(body),
  });
  res.end(body);
}

async function readJson(req: IncomingMessage): Promise<Record<string, unknown>> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const c of req) {
    size += (c as Buffer).length;
    if (size > MAX_REQUEST_BYTES) throw new RestError(413, "request body too large");
    chunks.push(c as Buffer);
  }
  const text = Buffer.concat(chunks).toString("utf8").trim();
  if (!text) return {};
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new RestError(422, "the body is not JSON");
  }
  if (value === null || typeof value !== "object" || Array.isArray(value))
    throw new RestError(422, "the body must be a JSON object");
  return value as Record<string, unknown>;
}

function optionalString(body: Record<string, unknown>, key: string): string | undefined {
  const v = body[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "string") throw new RestError(422, `${key} must be a string`);
  return v;
}

function envVars(body: Record<string, unknown>): Record<string, string> | undefined {
  const v = body.env_vars;
  if (v === undefined || v === null) return undefined;
  if (
    typeof v !== "object" ||
    Array.isArray(v) ||
    Object.values(v).some((x) => typeof x !== "string")
  )
    throw new RestError(422, "env_vars must map names to strings");
  return v as Record<string, string>;
}

/** E2B's language names: `js` and `ts` are short forms; python is the default. */
function normalise(language: string | undefined): string {
  const l = (language ?? "").trim().toLowerCase();
  if (!l) return "python";
  return l === "js" ? "javascript" : l === "ts" ? "typescript" : l;
}

function kernelOf(language: string): SandboxLanguage | "bash" {
  const k = KERNELS[language];
  // E2B's server fails to start a kernel it does not have (it answers 500); bad input is a 400 here.
  if (!k)
    throw new RestError(
      400,
      `Failed to create context: no kernel for language '${language}' (Sandpit serves python, javascript, typescript and bash)`,
    );
  return k;
}

async function makeContext(
  instance: SandboxInstance,
  state: SandboxState,
  language: string,
  cwd: string | undefined,
): Promise<{ id: string; ctx: InterpreterContext }> {
  const kernel = kernelOf(language);
  if (kernel === "bash") {
    const ctx = { language, cwd: cwd || E2B_HOME, target: undefined };
    const id = randomUUID();
    state.contexts.set(id, ctx);
    return { id, ctx };
  }
  const made = await instance.createCodeContext({
    language: kernel,
    ...(cwd ? { cwd: toSandbox(cwd) } : {}),
  });
  // The directory as the caller named it (made.cwd is sandboxd's name for it).
  const ctx = { language, cwd: cwd || E2B_HOME, target: made.id };
  state.contexts.set(made.id, ctx);
  return { id: made.id, ctx };
}

/** The E2B contexts: the ones made through E2B, and any other context the sandbox has. */
async function listContexts(instance: SandboxInstance, state: SandboxState) {
  const live = await instance.listCodeContexts();
  const targets = new Set([...state.contexts.values()].map((c) => c.target));
  const out = [...state.contexts.entries()]
    .filter(([, c]) => c.target === undefined || live.some((l) => l.id === c.target))
    .map(([id, c]) => ({ id, language: c.language, cwd: c.cwd }));
  for (const l of live)
    if (!targets.has(l.id)) out.push({ id: l.id, language: l.language, cwd: l.cwd });
  return out;
}

async function findContext(
  instance: SandboxInstance,
  state: SandboxState,
  id: string,
): Promise<InterpreterContext | undefined> {
  const known = state.contexts.get(id);
  if (known) return known;
  const live = (await instance.listCodeContexts()).find((c) => c.id === id);
  return live ? { language: live.language, cwd: live.cwd, target: live.id } : undefined;
}

export async function serveInterpreter(
  req: IncomingMessage,
  res: ServerResponse,
  pathname: string,
  instance: SandboxInstance,
): Promise<void> {
  const state = stateOf(instance);
  try {
    if (pathname === "/health" && req.method === "GET") return sendJson(res, 200, "OK");
    if (pathname === "/execute" && req.method === "POST")
      return await execute(req, res, instance, state);
    if (pathname === "/contexts" && req.method === "POST") {
      const body = await readJson(req);
      const { id, ctx } = await makeContext(
        instance,
        state,
        normalise(optionalString(body, "language")),
        optionalString(body, "cwd"),
      );
      return sendJson(res, 200, { id, language: ctx.language, cwd: ctx.cwd });
    }
    if (pathname === "/contexts" && req.method === "GET")
      return sendJson(res, 200, await listContexts(instance, state));
    const one = /^\/contexts\/([A-Za-z0-9-]{1,64})(\/restart)?$/.exec(pathname);
    if (one && ((req.method === "DELETE" && !one[2]) || (req.method === "POST" && one[2]))) {
      const id = one[1]!;
      const ctx = await findContext(instance, state, id);
      if (!ctx) return sendText(res, 404, `Context ${id} not found`);
      if (ctx.target) await instance.removeCodeContext(ctx.target);
      if (req.method === "DELETE") {
        state.contexts.delete(id);
        state.executions.delete(id);
        for (const [lang, p] of state.defaultContexts)
          if ((await p.catch(() => "")) === id) state.defaultContexts.delete(lang);
      } else if (ctx.target) {
        // sandboxd has no restart: a fresh interpreter with the same language and directory
        // takes the context's place under the same E2B id.
        const kernel = kernelOf(ctx.language) as SandboxLanguage;
        const made = await instance.createCodeContext({
          language: kernel,
          cwd: toSandbox(ctx.cwd),
        });
        state.contexts.set(id, { ...ctx, target: made.id });
        state.executions.delete(id);
      }
      return sendJson(res, 200, null);
    }
    return sendText(res, 404, `Not Found: ${req.method} ${pathname}`);
  } catch (err) {
    if (err instanceof RestError) return sendText(res, err.status, err.message);
    if (isSandboxError(err, "NOT_FOUND")) return sendText(res, 404, err.message);
    if (isSandboxError(err, "INVALID_ARGUMENT")) return sendText(res, 400, err.message);
    throw err;
  }
}

async function execute(
  req: IncomingMessage,
  res: ServerResponse,
  instance: SandboxInstance,
  state: SandboxState,
): Promise<void> {
  const body = await readJson(req);
  const code = body.code;
  if (typeof code !== "string") throw new RestError(422, "code must be a string");
  const contextId = optionalString(body, "context_id");
  const language = optionalString(body, "language");
  const envs = envVars(body);
  if (contextId && language)
    throw new RestError(400, "Only one of context_id or language can be provided");

  let id: string;
  let ctx: InterpreterContext | undefined;
  if (contextId) {
    id = contextId;
    ctx = await findContext(instance, state, contextId);
    if (!ctx) throw new RestError(404, `Context ${contextId} not found`);
  } else {
    const lang = normalise(language);
    kernelOf(lang);
    let made = state.defaultContexts.get(lang);
    if (!made) {
      made = makeContext(instance, state, lang, undefined).then((m) => m.id);
      state.defaultContexts.set(lang, made);
      made.catch(() => state.defaultContexts.delete(lang));
    }
    id = await made;
    ctx = state.contexts.get(id)!;
  }

  // The client going away interrupts the cell (the context keeps its state).
  const abort = new AbortController();
  res.once("close", () => {
    if (!res.writableFinished) abort.abort();
  });
  const line = (o: object) => res.write(`${JSON.stringify(o)}\n`);
  const ts = () => new Date().toISOString();
  const onStdout = (text: string) => line({ type: "stdout", text, timestamp: ts() });
  const onStderr = (text: string) => line({ type: "stderr", text, timestamp: ts() });
  const count = (state.executions.get(id) ?? 0) + 1;
  state.executions.set(id, count);
  res.writeHead(200, { "content-type": "application/x-ndjson" });
  res.flushHeaders();
  try {
    if (ctx.target === undefined) {
      const { cwd, pwd } = startDir(ctx.cwd);
      const cd = cwd === undefined ? `cd ${shellQuote(pwd)} && ` : "";
      const r = await instance.commands.run(`${cd}exec bash -c ${shellQuote(code)}`, {
        ...(cwd === undefined ? {} : { cwd }),
        envs: { PWD: pwd, ...envs },
        onStdout,
        onStderr,
        signal: abort.signal,
      });
      if (r.exitCode !== 0)
        line({
          type: "error",
          name: "ExitCodeError",
          value: `exit status ${r.exitCode}`,
          traceback: "",
        });
    } else {
      const r = await instance.executeCode(code, kernelOf(ctx.language) as SandboxLanguage, {
        context: ctx.target,
        ...(envs ? { envs } : {}),
        onStdout,
        onStderr,
        onResult: (result) => line(resultLine(result)),
        signal: abort.signal,
      });
      if (r.error)
        line({
          type: "error",
          name: r.error.name,
          value: r.error.message,
          traceback: r.error.traceback ?? "",
        });
    }
  } catch (err) {
    if (abort.signal.aborted) return;
    // A context's cell fails this way only when its interpreter died (the context is gone):
    // named as the code interpreter names a dead kernel, so clients know the state is lost.
    const died = ctx.target !== undefined && isSandboxError(err, "EXECUTION_FAILED");
    line({
      type: "error",
      name: died ? "DeadKernelError" : isSandboxError(err) ? `SandboxError.${err.code}` : "Error",
      value: err instanceof Error ? err.message : String(err),
      traceback: "",
    });
  }
  line({ type: "number_of_executions", execution_count: count });
  line({ type: "end_of_execution" });
  res.end();
}

/** A rich result as the code interpreter sends it: its formats by name, plus `is_main_result`. */
function resultLine(r: CodeResult) {
  const { isMainResult, table, extra, ...formats } = r;
  return {
    type: "result",
    ...formats,
    // A DataFrame's values are the SDKs' `data` (E2B gives it with text and html): column name
    // to that column's values, as pandas' to_dict(orient="list").
    ...(table
      ? {
          data: Object.fromEntries(table.columns.map((c, i) => [c, table.rows.map((r) => r[i])])),
        }
      : {}),
    ...extra,
    is_main_result: isMainResult,
  };
}

function shellQuote(s: string): string {
  return `'${s.replaceAll("'", `'\\''`)}'`;
}

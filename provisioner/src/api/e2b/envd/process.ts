/**
 * envd's `process.Process` service onto the SandboxInstance's background processes and
 * terminals. A started process is a sandboxd background process (or terminal, with `pty`):
 * `Start` streams its start (pid), its output and its end; `Connect` attaches again and, as
 * envd's does, follows from that moment (what sandboxd kept is not replayed); input, signals,
 * stdin closing and terminal resizing go to sandboxd by pid.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import { create, type DescMessage, type MessageShape } from "@bufbuild/protobuf";
import type { CommandHandle, PtyHandle, SandboxInstance } from "@sandpit/sdk";
import { isSandboxError } from "@sandpit/sdk/errors";
import {
  deadlineMs,
  readEnvelopes,
  readStreamRequest,
  readUnary,
  RpcError,
  sendUnary,
  ServerStream,
  decode,
  type CallShape,
} from "./connect.ts";
import { startDir } from "./home.ts";
import { messageDesc } from "./proto.ts";
import { stateOf, type ProcessConfig, type SandboxState } from "./state.ts";

const d = (name: string) => messageDesc(`process.${name}`);
const EVENT_RESPONSE = { Start: d("StartResponse"), Connect: d("ConnectResponse") };

/** envd's Signal enum values. */
const SIGNALS: Record<number, "SIGKILL" | "SIGTERM"> = { 9: "SIGKILL", 15: "SIGTERM" };
const SIGNAL_NUMBER = { SIGKILL: 9, SIGTERM: 15 } as const;
/** How Go's ProcessState names a signal in envd's end event ("signal: killed"). */
const GO_SIGNAL_TEXT = { SIGKILL: "killed", SIGTERM: "terminated" } as const;

type Event =
  | { case: "start"; value: { pid: number } }
  | { case: "data"; value: { output: { case: "stdout" | "stderr" | "pty"; value: Uint8Array } } }
  | { case: "end"; value: { exitCode: number; exited: boolean; status: string; error?: string } }
  | { case: "keepalive"; value: object };

interface Selector {
  selector: { case: "pid"; value: number } | { case: "tag"; value: string } | { case: undefined };
}

export async function serveProcess(
  method: string,
  req: IncomingMessage,
  res: ServerResponse,
  shape: CallShape,
  instance: SandboxInstance,
): Promise<void> {
  const state = stateOf(instance);
  switch (method) {
    case "Start":
    case "Connect":
      return stream(method, req, res, shape, instance, state);
    case "StreamInput":
      return streamInput(req, res, shape, instance);
  }
  const unary = UNARY[method];
  if (!unary) throw new RpcError("unimplemented", `process.Process/${method} is not a method`, 404);
  const input = await readUnary(req, shape, d(`${method}Request`));
  await unary(input as never, instance, state);
  const out = d(`${method}Response`);
  sendUnary(res, shape, out, method === "List" ? await list(instance, state) : create(out));
}

type Unary = (msg: never, instance: SandboxInstance, state: SandboxState) => Promise<void>;

const UNARY: Record<string, Unary> = {
  List: async () => undefined,
  SendInput: async (msg: { process?: Selector; input?: { input: InputCase } }, instance) =>
    sendInput(instance, await pidOf(instance, msg.process), msg.input?.input),
  SendSignal: async (msg: { process?: Selector; signal: number }, instance, state) => {
    const signal = SIGNALS[msg.signal];
    if (!signal) throw new RpcError("invalid_argument", `unsupported signal ${msg.signal}`);
    const pid = await pidOf(instance, msg.process);
    const info = (await instance.commands.list()).find((p) => p.pid === pid);
    state.signalled.set(pid, signal);
    // A terminal is ended by the terminal API (which kills its group); there is no other signal.
    const delivered = info?.pty
      ? await instance.pty.kill(pid)
      : await instance.commands.kill(pid, signal);
    if (!delivered) {
      state.signalled.delete(pid);
      throw new RpcError("not_found", `process with pid ${pid} not found`);
    }
  },
  CloseStdin: async (msg: { process?: Selector }, instance) => {
    const pid = await pidOf(instance, msg.process);
    await instance.commands.closeStdin(pid).catch(goneIfExited(pid));
  },
  Update: async (
    msg: { process?: Selector; pty?: { size?: { cols: number; rows: number } } },
    instance,
  ) => {
    const pid = await pidOf(instance, msg.process);
    const size = msg.pty?.size;
    if (size) await instance.pty.resize(pid, { cols: size.cols, rows: size.rows });
  },
};

type InputCase = { case: "stdin" | "pty"; value: Uint8Array } | { case: undefined };

async function sendInput(
  instance: SandboxInstance,
  pid: number,
  input: InputCase | undefined,
): Promise<void> {
  if (!input?.case) throw new RpcError("invalid_argument", "input must carry stdin or pty bytes");
  if (input.case === "pty") await instance.pty.sendInput(pid, input.value);
  else await instance.commands.sendStdin(pid, input.value).catch(goneIfExited(pid));
}

/**
 * sandboxd keeps an exited process (its output can be read again) and refuses its input with
 * CONFLICT; envd has forgotten it, and says so as for any unknown pid.
 */
const goneIfExited =
  (pid: number) =>
  (err: unknown): never => {
    if (isSandboxError(err, "CONFLICT"))
      throw new RpcError("not_found", `process with pid ${pid} not found`);
    throw err;
  };

/** What the translator kept of a process that has exited. */
function forget(state: SandboxState, pid: number): void {
  state.signalled.delete(pid);
  state.configs.delete(pid);
}

async function list(instance: SandboxInstance, state: SandboxState) {
  const all = await instance.commands.list();
  // Exits no stream saw (every client had gone).
  for (const p of all) if (p.exitCode !== undefined) forget(state, p.pid);
  const running = all.filter((p) => p.exitCode === undefined);
  return create(d("ListResponse"), {
    processes: running.map((p) => ({
      pid: p.pid,
      config: state.configs.get(p.pid) ?? {
        cmd: "/bin/sh",
        args: ["-c", p.command],
        cwd: p.cwd,
      },
      ...(p.tag === undefined ? {} : { tag: p.tag }),
    })),
  }) as MessageShape<DescMessage>;
}

/** The pid a selector names (a tag is looked up among running processes). */
async function pidOf(instance: SandboxInstance, sel: Selector | undefined): Promise<number> {
  const s = sel?.selector;
  if (s?.case === "pid") return s.value;
  if (s?.case === "tag") {
    const p = (await instance.commands.list()).find(
      (x) => x.tag === s.value && x.exitCode === undefined,
    );
    if (!p) throw new RpcError("not_found", `process with tag ${s.value} not found`);
    return p.pid;
  }
  throw new RpcError("invalid_argument", "a process selector (pid or tag) is required");
}

/** One argument of a POSIX shell command line. */
function quote(arg: string): string {
  return /^[\w@%+=:,./-]+$/.test(arg) ? arg : `'${arg.replaceAll("'", `'\\''`)}'`;
}

async function stream(
  method: "Start" | "Connect",
  req: IncomingMessage,
  res: ServerResponse,
  shape: CallShape,
  instance: SandboxInstance,
  state: SandboxState,
): Promise<void> {
  if (!shape.streaming)
    throw new RpcError("invalid_argument", `process.Process/${method} is a server stream`, 415);
  const deadline = deadlineMs(req);
  // Counted from the request's arrival: the client gives up then too.
  const deadlineAt = deadline === undefined ? undefined : Date.now() + deadline;
  const msg = (await readStreamRequest(req, shape, d(`${method}Request`))) as {
    process?: ProcessConfig & Selector;
    pty?: { size?: { cols: number; rows: number } };
    tag?: string;
    stdin?: boolean;
  };
  const out = new ServerStream(req, res, shape, EVENT_RESPONSE[method]);
  // Events are written in order, one at a time; output that arrives before the start event is
  // sent waits for it.
  let chain = Promise.resolve();
  let pid = 0;
  const held: Event[] = [];
  const emit = (event: Event) => {
    if (pid === 0 && event.case !== "start") {
      held.push(event);
      return;
    }
    chain = chain.then(() =>
      out.send(create(EVENT_RESPONSE[method], { event: { event } }) as never),
    );
  };
  const output = (kind: "stdout" | "stderr" | "pty") => (data: string | Uint8Array) =>
    emit({
      case: "data",
      value: { output: { case: kind, value: typeof data === "string" ? Buffer.from(data) : data } },
    });
  let handle: CommandHandle | PtyHandle;
  let isPty: boolean;
  try {
    if (method === "Start") {
      const config = msg.process;
      if (!config?.cmd) throw new RpcError("invalid_argument", "process.cmd is required");
      const { cwd, pwd } = startDir(config.cwd);
      const command = [
        ...(cwd === undefined ? ["cd", quote(pwd), "&&"] : []),
        "exec",
        ...[config.cmd, ...config.args].map(quote),
      ].join(" ");
      // The caller's envs win, PWD included.
      const envs = { PWD: pwd, ...config.envs };
      isPty = msg.pty !== undefined;
      if (msg.pty) {
        handle = await instance.pty.create({
          cols: msg.pty.size?.cols || 80,
          rows: msg.pty.size?.rows || 24,
          command,
          ...(cwd === undefined ? {} : { cwd }),
          envs,
          onData: output("pty"),
        });
      } else {
        handle = await instance.commands.run(command, {
          background: true,
          ...(cwd === undefined ? {} : { cwd }),
          envs,
          ...(msg.tag === undefined ? {} : { tag: msg.tag }),
          onStdout: output("stdout"),
          onStderr: output("stderr"),
        });
        // envd gives a process without `stdin` an empty, closed standard input.
        if (!msg.stdin) await handle.closeStdin();
      }
      state.configs.set(handle.pid, {
        cmd: config.cmd,
        args: config.args,
        envs: config.envs,
        cwd: pwd,
      });
    } else {
      const target = await pidOf(instance, msg.process);
      const info = (await instance.commands.list()).find((p) => p.pid === target);
      if (!info || info.exitCode !== undefined)
        throw new RpcError("not_found", `process with pid ${target} not found`);
      isPty = info.pty;
      // envd follows from the moment of attaching: nothing sandboxd kept is replayed.
      handle = isPty
        ? await instance.pty.connect(target, { onData: output("pty"), replay: false })
        : await instance.commands.connect(target, {
            offset: "end",
            onStdout: output("stdout"),
            onStderr: output("stderr"),
          });
    }
  } catch (err) {
    out.end(err);
    return;
  }
  pid = handle.pid;
  emit({ case: "start", value: { pid } });
  for (const e of held.splice(0)) emit(e);
  out.keepalive(
    req,
    () =>
      create(EVENT_RESPONSE[method], {
        event: { event: { case: "keepalive", value: {} } },
      }) as never,
  );

  // The client's deadline bounds the process itself, as envd's does (E2B's `timeoutMs`, 0 for
  // none): past it, the process group is killed and the stream ends with deadline_exceeded. The
  // client gives up at the same moment and may be gone first: the kill happens all the same.
  let timedOut = false;
  let exited = false;
  const timer =
    method === "Start" && deadlineAt !== undefined
      ? setTimeout(() => {
          if (exited) return;
          timedOut = true;
          void (isPty ? instance.pty.kill(pid) : instance.commands.kill(pid, "SIGKILL")).catch(
            () => undefined,
          );
        }, deadlineAt - Date.now())
      : undefined;
  // A client that goes away stops following; the process keeps running (Connect reattaches).
  out.closed.addEventListener("abort", () => void handle.disconnect().catch(() => undefined));
  try {
    const { exitCode } = await handle.wait();
    exited = true;
    clearTimeout(timer);
    await chain;
    if (timedOut) {
      out.end(
        new RpcError(
          "deadline_exceeded",
          "the process ran past the request's deadline and was killed",
        ),
      );
    } else {
      emit({ case: "end", value: endEvent(exitCode, state.signalled.get(pid)) });
      await chain;
      out.end();
    }
  } catch (err) {
    // wait() rejects once disconnect() ran: the client is gone, nothing to tell it.
    out.end(out.closed.aborted ? undefined : err);
  } finally {
    // A client that went away leaves the process running: List still shows it as started.
    if (exited) forget(state, pid);
  }
}

/**
 * envd's end event: Go's ProcessState. sandboxd reports a signal's death as 128 + its number, as
 * a shell does; when E2B sent that signal, it is reported as envd does (exit code -1, not exited,
 * "signal: killed").
 */
function endEvent(exitCode: number, signal: string | undefined) {
  if (signal && exitCode === 128 + SIGNAL_NUMBER[signal as keyof typeof SIGNAL_NUMBER]) {
    const status = `signal: ${GO_SIGNAL_TEXT[signal as keyof typeof GO_SIGNAL_TEXT]}`;
    return { exitCode: -1, exited: false, status, error: status };
  }
  const status = `exit status ${exitCode}`;
  return { exitCode, exited: true, status, ...(exitCode === 0 ? {} : { error: status }) };
}

/** process.Process/StreamInput: a client stream of input for one process. */
async function streamInput(
  req: IncomingMessage,
  res: ServerResponse,
  shape: CallShape,
  instance: SandboxInstance,
): Promise<void> {
  if (!shape.streaming)
    throw new RpcError("invalid_argument", "process.Process/StreamInput is a client stream", 415);
  const desc = d("StreamInputRequest");
  let pid: number | undefined;
  for await (const bytes of readEnvelopes(req)) {
    const { event } = decode(desc, shape.codec, bytes) as unknown as {
      event:
        | { case: "start"; value: { process?: Selector } }
        | { case: "data"; value: { input?: { input: InputCase } } }
        | { case: "keepalive" | undefined };
    };
    if (event.case === "start") pid = await pidOf(instance, event.value.process);
    else if (event.case === "data") {
      if (pid === undefined) throw new RpcError("invalid_argument", "input before the start event");
      await sendInput(instance, pid, event.value.input?.input);
    }
  }
  const out = new ServerStream(req, res, shape, d("StreamInputResponse"));
  await out.send(create(d("StreamInputResponse")) as never);
  out.end();
}

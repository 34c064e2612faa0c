/**
 * The Connect protocol (connectrpc.com/docs/protocol), server side, as much of it as envd's
 * clients use: unary calls (`application/json` or `application/proto`, gzip request bodies),
 * server streams (`application/connect+json` or `+proto`: enveloped messages and an end-stream
 * message carrying the error), client streams (StreamInput), `Connect-Timeout-Ms`, and Connect
 * error envelopes with their HTTP statuses. Responses are never compressed (a server may always
 * answer with identity); both E2B SDKs ask for no compression anyway.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import { gunzipSync } from "node:zlib";
import { fromBinary, fromJson, toBinary, toJson, type DescMessage } from "@bufbuild/protobuf";
import type { MessageShape } from "@bufbuild/protobuf";
import { SandboxError } from "@sandpit/sdk/errors";

/** Connect's error codes and the HTTP status each is sent with. */
const STATUS = {
  canceled: 499,
  unknown: 500,
  invalid_argument: 400,
  deadline_exceeded: 504,
  not_found: 404,
  already_exists: 409,
  permission_denied: 403,
  resource_exhausted: 429,
  failed_precondition: 400,
  aborted: 409,
  out_of_range: 400,
  unimplemented: 501,
  internal: 500,
  unavailable: 503,
  data_loss: 500,
  unauthenticated: 401,
} as const;
export type ConnectCode = keyof typeof STATUS;

export class RpcError extends Error {
  readonly code: ConnectCode;
  /** The HTTP status, when it differs from the code's (an unknown route is a plain 404). */
  readonly status: number;
  constructor(code: ConnectCode, message: string, status: number = STATUS[code]) {
    super(message);
    this.code = code;
    this.status = status;
  }
}

/** Sandpit's error codes as Connect's, so the SDKs raise their own classes (NotFoundError...). */
const FROM_SANDBOX: Record<string, ConnectCode> = {
  NOT_FOUND: "not_found",
  INVALID_ARGUMENT: "invalid_argument",
  CONFLICT: "failed_precondition",
  UNAUTHORIZED: "unauthenticated",
  CAPACITY_EXCEEDED: "resource_exhausted",
  RATE_LIMITED: "resource_exhausted",
  TIMEOUT: "deadline_exceeded",
  NOT_SUPPORTED: "unimplemented",
  CONNECTION_FAILED: "unavailable",
  EXECUTION_FAILED: "failed_precondition",
};

export function toRpcError(err: unknown): RpcError {
  if (err instanceof RpcError) return err;
  if (err instanceof SandboxError)
    return new RpcError(FROM_SANDBOX[err.code] ?? "internal", err.message);
  return new RpcError("internal", err instanceof Error ? err.message : String(err));
}

/** Largest request message (after decompression): stdin chunks are the biggest envd takes. */
const MAX_MESSAGE_BYTES = 16 * 1024 * 1024;

export type Codec = "json" | "proto";

/** What a request's headers say about how to read it and answer it. */
export interface CallShape {
  codec: Codec;
  streaming: boolean;
}

/** Reads the content type; anything else is 415, as Connect servers answer. */
export function callShape(req: IncomingMessage): CallShape {
  const type = String(req.headers["content-type"] ?? "")
    .split(";")[0]!
    .trim()
    .toLowerCase();
  const m = /^application\/(connect\+)?(json|proto)$/.exec(type);
  if (!m)
    throw new RpcError("invalid_argument", `unsupported content type ${JSON.stringify(type)}`, 415);
  return { codec: m[2] as Codec, streaming: m[1] !== undefined };
}

export function decode<D extends DescMessage>(
  desc: D,
  codec: Codec,
  bytes: Uint8Array,
): MessageShape<D> {
  try {
    if (codec === "proto") return fromBinary(desc, bytes);
    const text = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
    return fromJson(desc, text.trim() === "" ? {} : JSON.parse(text), {
      ignoreUnknownFields: true,
    });
  } catch (err) {
    throw new RpcError(
      "invalid_argument",
      `cannot decode ${desc.typeName}: ${err instanceof Error ? err.message : String(err)}`,
    );
  }
}

export function encode<D extends DescMessage>(
  desc: D,
  codec: Codec,
  msg: MessageShape<D>,
): Uint8Array {
  return codec === "proto" ? toBinary(desc, msg) : Buffer.from(JSON.stringify(toJson(desc, msg)));
}

function inflate(bytes: Uint8Array, encoding: string | undefined): Uint8Array {
  const e = (encoding ?? "identity").trim().toLowerCase();
  if (e === "identity" || e === "") return bytes;
  if (e !== "gzip")
    throw new RpcError("invalid_argument", `unsupported compression ${JSON.stringify(e)}`);
  try {
    return gunzipSync(bytes, { maxOutputLength: MAX_MESSAGE_BYTES });
  } catch (err) {
    throw new RpcError(
      "invalid_argument",
      `cannot decompress the message: ${(err as Error).message}`,
    );
  }
}

async function readAll(req: IncomingMessage, limit: number): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const c of req) {
    size += (c as Buffer).length;
    if (size > limit)
      throw new RpcError("resource_exhausted", `message larger than ${limit} bytes`);
    chunks.push(c as Buffer);
  }
  return Buffer.concat(chunks);
}

/** The request message of a unary call. */
export async function readUnary<D extends DescMessage>(
  req: IncomingMessage,
  shape: CallShape,
  desc: D,
): Promise<MessageShape<D>> {
  const body = await readAll(req, MAX_MESSAGE_BYTES);
  return decode(desc, shape.codec, inflate(body, req.headers["content-encoding"] as string));
}

/**
 * Enveloped messages of a streaming request, as they arrive: flags (bit 0: compressed), a
 * 4-byte big-endian length, the message.
 */
export async function* readEnvelopes(req: IncomingMessage): AsyncGenerator<Uint8Array> {
  const encoding = req.headers["connect-content-encoding"] as string | undefined;
  let buf: Buffer = Buffer.alloc(0);
  for await (const c of req) {
    buf = buf.length ? Buffer.concat([buf, c as Buffer]) : (c as Buffer);
    while (buf.length >= 5) {
      const flags = buf[0]!;
      const len = buf.readUInt32BE(1);
      if (len > MAX_MESSAGE_BYTES)
        throw new RpcError("resource_exhausted", `message larger than ${MAX_MESSAGE_BYTES} bytes`);
      if (flags & ~0x03) throw new RpcError("invalid_argument", `invalid envelope flags ${flags}`);
      if (buf.length < 5 + len) break;
      const msg = buf.subarray(5, 5 + len);
      buf = buf.subarray(5 + len);
      if (flags & 0x02) return; // a client's end-of-stream
      yield flags & 0x01 ? inflate(msg, encoding) : msg;
    }
  }
  if (buf.length > 0)
    throw new RpcError("invalid_argument", "the request ended inside an envelope");
}

/** The one request message of a server-streaming call. */
export async function readStreamRequest<D extends DescMessage>(
  req: IncomingMessage,
  shape: CallShape,
  desc: D,
): Promise<MessageShape<D>> {
  let first: Uint8Array | undefined;
  for await (const m of readEnvelopes(req)) {
    if (first) throw new RpcError("invalid_argument", "a server-streaming call takes one message");
    first = m;
  }
  if (!first) throw new RpcError("invalid_argument", "the request has no message");
  return decode(desc, shape.codec, first);
}

function errorJson(err: RpcError) {
  return { code: err.code, message: err.message };
}

/** Answers a unary call (or any call that failed before its stream began) with an error. */
export function sendError(res: ServerResponse, err: RpcError): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const body = JSON.stringify(errorJson(err));
  res.writeHead(err.status, {
    "content-type": "application/json",
    "content-length": Buffer.byteLength(body),
  });
  res.end(body);
}

export function sendUnary<D extends DescMessage>(
  res: ServerResponse,
  shape: CallShape,
  desc: D,
  msg: MessageShape<D>,
): void {
  const body = encode(desc, shape.codec, msg);
  res.writeHead(200, {
    "content-type": `application/${shape.codec}`,
    "content-length": body.length,
  });
  res.end(body);
}

function envelope(flags: number, payload: Uint8Array): Buffer {
  const head = Buffer.alloc(5);
  head[0] = flags;
  head.writeUInt32BE(payload.length, 1);
  return Buffer.concat([head, payload]);
}

/**
 * A server stream: messages as envelopes, then the end-stream message (with the error, if any).
 * `closed` aborts when the client goes away or the stream ends; `keepalive` sends the
 * service's keepalive message at the interval the client asked for (`Keepalive-Ping-Interval`,
 * seconds), as envd does, so idle proxies and the client's idle timers see traffic.
 */
export class ServerStream<D extends DescMessage> {
  readonly closed: AbortSignal;
  private readonly controller = new AbortController();
  private readonly res: ServerResponse;
  private readonly shape: CallShape;
  private readonly desc: D;
  private timer: NodeJS.Timeout | undefined;
  private ended = false;

  constructor(req: IncomingMessage, res: ServerResponse, shape: CallShape, desc: D) {
    this.res = res;
    this.shape = shape;
    this.desc = desc;
    this.closed = this.controller.signal;
    res.once("close", () => this.close());
    res.writeHead(200, { "content-type": `application/connect+${shape.codec}` });
    res.flushHeaders();
  }

  /** Writes one message; resolves when the socket took it (backpressure for fast producers). */
  async send(msg: MessageShape<D>): Promise<void> {
    if (this.ended) return;
    if (!this.res.write(envelope(0, encode(this.desc, this.shape.codec, msg)))) {
      await new Promise<void>((resolve) => {
        const done = () => {
          this.res.off("drain", done);
          this.closed.removeEventListener("abort", done);
          resolve();
        };
        this.res.once("drain", done);
        this.closed.addEventListener("abort", done);
      });
    }
  }

  keepalive(req: IncomingMessage, make: () => MessageShape<D>): void {
    const asked = Number(req.headers["keepalive-ping-interval"]);
    const seconds = Number.isFinite(asked) && asked >= 1 ? Math.min(asked, 300) : 50;
    this.timer = setInterval(() => void this.send(make()), seconds * 1000);
    this.timer.unref();
  }

  /** Ends the stream: the end-stream message (always JSON, per the protocol) with the error. */
  end(err?: unknown): void {
    if (this.ended) return;
    const payload = err === undefined ? {} : { error: errorJson(toRpcError(err)) };
    this.res.end(envelope(0x02, Buffer.from(JSON.stringify(payload))));
    this.close();
  }

  private close(): void {
    this.ended = true;
    clearInterval(this.timer);
    this.controller.abort();
  }
}

/** The client's deadline (`Connect-Timeout-Ms`), or undefined when it set none. */
export function deadlineMs(req: IncomingMessage): number | undefined {
  const raw = req.headers["connect-timeout-ms"];
  if (raw === undefined) return undefined;
  const ms = Number(raw);
  if (!/^\d{1,10}$/.test(String(raw)) || ms <= 0)
    throw new RpcError("invalid_argument", `invalid Connect-Timeout-Ms ${JSON.stringify(raw)}`);
  return ms;
}

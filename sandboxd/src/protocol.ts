/**
 * The sandboxd wire protocol: request schemas (validated on the server) here, and everything
 * else (response shapes, the error envelope, limits; ./wire.ts) re-exported. Both ends import
 * these two files, so the server and every provider's data-plane client cannot drift apart.
 *
 * The schemas are defined in ./request-schemas.ts, each behind a function that builds it once:
 * here they are all built when this module loads; sandboxd builds each on its first request.
 */
import type * as z from "zod";
import * as schemas from "./request-schemas.ts";

export * from "./wire.ts";

/** A TCP port inside a sandbox, as getHost, sandboxd's tunnel and the provisioner's ports route take one. */
export const Port = schemas.port();

export const RunCommandRequest = schemas.runCommand();
export type RunCommandRequest = z.infer<typeof RunCommandRequest>;

export const ExecuteCodeRequest = schemas.executeCode();
export type ExecuteCodeRequest = z.infer<typeof ExecuteCodeRequest>;

/** A package as pip or npm takes it (see ./request-schemas.ts, packageSpec). */
export const PackageSpec = schemas.packageSpec();
export const PackageSpecs = schemas.packageSpecs();

export const InstallPackagesRequest = schemas.installPackages();
export type InstallPackagesRequest = z.infer<typeof InstallPackagesRequest>;

export const MkdirRequest = schemas.mkdir();

export const InitRequest = schemas.init();
export type InitRequest = z.infer<typeof InitRequest>;

/** `POST /v1/drain` (./wire.ts DRAIN_PATH). */
export const DrainRequest = schemas.drain();
export type DrainRequest = z.infer<typeof DrainRequest>;

// --- Terminals (PTY): see docs/terminals.md -----------------------------------------------------

export const PtySize = schemas.ptySize();
export type PtySize = z.infer<typeof PtySize>;

/** `POST /v1/pty`: without `command`, the sandbox user's login shell (`bash -l`). */
export const PtyCreateRequest = schemas.ptyCreate();
export type PtyCreateRequest = z.infer<typeof PtyCreateRequest>;

/**
 * Text frames on a terminal's WebSocket (`GET /v1/pty/<pid>/connect`); binary frames are the
 * terminal's bytes both ways. The client may send `resize`; the server sends `exit` once, then
 * closes with 1000.
 */
export const PtyClientMessage = schemas.ptyClientMessage();
export type PtyClientMessage = z.infer<typeof PtyClientMessage>;

// --- Code contexts: persistent interpreters whose cells share state and return rich results ---

export const CreateContextRequest = schemas.createContext();
export type CreateContextRequest = z.infer<typeof CreateContextRequest>;

export const ExecuteCellRequest = schemas.executeCell();
export type ExecuteCellRequest = z.infer<typeof ExecuteCellRequest>;

// --- Files, complete (issue 14): move, append, glob, grep, watch (routes in files.ts) ---

export const RenameRequest = schemas.rename();
export type RenameRequest = z.infer<typeof RenameRequest>;

export const GlobRequest = schemas.glob();
export type GlobRequest = z.infer<typeof GlobRequest>;

export const GrepRequest = schemas.grep();
export type GrepRequest = z.infer<typeof GrepRequest>;

// --- Background processes (issue 14: processes with handles) ---

export const StartProcessRequest = schemas.startProcess();
export type StartProcessRequest = z.infer<typeof StartProcessRequest>;

export const SignalProcessRequest = schemas.signalProcess();

/**
 * envd's two Connect services, `process.Process` and `filesystem.Filesystem`, declared here as
 * data: a compact table per message, turned into descriptors at load time with
 * @bufbuild/protobuf's runtime (no generated code, no build step). The field names, numbers and
 * types are the wire contract the E2B SDKs speak (their envd `process.proto` and
 * `filesystem.proto`); with the descriptors, one schema gives both the binary and the JSON
 * encoding (proto3 JSON: camelCase names, bytes as base64, int64 as strings, enums by name).
 */
import {
  create,
  createFileRegistry,
  type DescMessage,
  type FileRegistry,
  type MessageInitShape,
} from "@bufbuild/protobuf";
import {
  FieldDescriptorProto_Label as Label,
  FieldDescriptorProto_Type as Type,
  DescriptorProtoSchema,
  FileDescriptorProtoSchema,
  file_google_protobuf_timestamp,
  FieldDescriptorProtoSchema,
} from "@bufbuild/protobuf/wkt";

/**
 * One field: `[name, number, type, flags]`. `type` is a scalar name or a message/enum name
 * (relative to the package, or `.google.protobuf.Timestamp`). Flags: `repeated`, `optional`
 * (proto3 optional: presence tracked), `oneof:<name>` (a member of that oneof), `map` (a
 * map<string,string> field, declared as its entry message).
 */
type Field = [string, number, string, string?];
interface Message {
  fields: Field[];
  nested?: Record<string, Message>;
}

const SCALARS: Record<string, Type> = {
  string: Type.STRING,
  bool: Type.BOOL,
  uint32: Type.UINT32,
  sint32: Type.SINT32,
  int64: Type.INT64,
  bytes: Type.BYTES,
};

const STRING_MAP: Message = {
  fields: [
    ["key", 1, "string"],
    ["value", 2, "string"],
  ],
};

const PROCESS: Record<string, Message> = {
  PTY: { fields: [["size", 1, "PTY.Size"]], nested: { Size: sizeMessage() } },
  ProcessConfig: {
    fields: [
      ["cmd", 1, "string"],
      ["args", 2, "string", "repeated"],
      ["envs", 3, "ProcessConfig.EnvsEntry", "map"],
      ["cwd", 4, "string", "optional"],
    ],
    nested: { EnvsEntry: STRING_MAP },
  },
  ListRequest: { fields: [] },
  ProcessInfo: {
    fields: [
      ["config", 1, "ProcessConfig"],
      ["pid", 2, "uint32"],
      ["tag", 3, "string", "optional"],
    ],
  },
  ListResponse: { fields: [["processes", 1, "ProcessInfo", "repeated"]] },
  StartRequest: {
    fields: [
      ["process", 1, "ProcessConfig"],
      ["pty", 2, "PTY", "optional"],
      ["tag", 3, "string", "optional"],
      ["stdin", 4, "bool", "optional"],
    ],
  },
  UpdateRequest: {
    fields: [
      ["process", 1, "ProcessSelector"],
      ["pty", 2, "PTY", "optional"],
    ],
  },
  UpdateResponse: { fields: [] },
  ProcessEvent: {
    fields: [
      ["start", 1, "ProcessEvent.StartEvent", "oneof:event"],
      ["data", 2, "ProcessEvent.DataEvent", "oneof:event"],
      ["end", 3, "ProcessEvent.EndEvent", "oneof:event"],
      ["keepalive", 4, "ProcessEvent.KeepAlive", "oneof:event"],
    ],
    nested: {
      StartEvent: { fields: [["pid", 1, "uint32"]] },
      DataEvent: {
        fields: [
          ["stdout", 1, "bytes", "oneof:output"],
          ["stderr", 2, "bytes", "oneof:output"],
          ["pty", 3, "bytes", "oneof:output"],
        ],
      },
      EndEvent: {
        fields: [
          ["exit_code", 1, "sint32"],
          ["exited", 2, "bool"],
          ["status", 3, "string"],
          ["error", 4, "string", "optional"],
        ],
      },
      KeepAlive: { fields: [] },
    },
  },
  StartResponse: { fields: [["event", 1, "ProcessEvent"]] },
  ConnectResponse: { fields: [["event", 1, "ProcessEvent"]] },
  SendInputRequest: {
    fields: [
      ["process", 1, "ProcessSelector"],
      ["input", 2, "ProcessInput"],
    ],
  },
  SendInputResponse: { fields: [] },
  ProcessInput: {
    fields: [
      ["stdin", 1, "bytes", "oneof:input"],
      ["pty", 2, "bytes", "oneof:input"],
    ],
  },
  StreamInputRequest: {
    fields: [
      ["start", 1, "StreamInputRequest.StartEvent", "oneof:event"],
      ["data", 2, "StreamInputRequest.DataEvent", "oneof:event"],
      ["keepalive", 3, "StreamInputRequest.KeepAlive", "oneof:event"],
    ],
    nested: {
      StartEvent: { fields: [["process", 1, "ProcessSelector"]] },
      DataEvent: { fields: [["input", 2, "ProcessInput"]] },
      KeepAlive: { fields: [] },
    },
  },
  StreamInputResponse: { fields: [] },
  SendSignalRequest: {
    fields: [
      ["process", 1, "ProcessSelector"],
      ["signal", 2, "Signal"],
    ],
  },
  SendSignalResponse: { fields: [] },
  CloseStdinRequest: { fields: [["process", 1, "ProcessSelector"]] },
  CloseStdinResponse: { fields: [] },
  ConnectRequest: { fields: [["process", 1, "ProcessSelector"]] },
  ProcessSelector: {
    fields: [
      ["pid", 1, "uint32", "oneof:selector"],
      ["tag", 2, "string", "oneof:selector"],
    ],
  },
};

const ENTRY_FIELDS: Field[] = [["entry", 1, "EntryInfo"]];
const WATCH_FIELDS: Field[] = [
  ["path", 1, "string"],
  ["recursive", 2, "bool"],
  ["include_entry", 3, "bool"],
  ["allow_network_mounts", 4, "bool"],
];

const FILESYSTEM: Record<string, Message> = {
  MoveRequest: {
    fields: [
      ["source", 1, "string"],
      ["destination", 2, "string"],
    ],
  },
  MoveResponse: { fields: ENTRY_FIELDS },
  MakeDirRequest: { fields: [["path", 1, "string"]] },
  MakeDirResponse: { fields: ENTRY_FIELDS },
  RemoveRequest: { fields: [["path", 1, "string"]] },
  RemoveResponse: { fields: [] },
  StatRequest: { fields: [["path", 1, "string"]] },
  StatResponse: { fields: ENTRY_FIELDS },
  EntryInfo: {
    fields: [
      ["name", 1, "string"],
      ["type", 2, "FileType"],
      ["path", 3, "string"],
      ["size", 4, "int64"],
      ["mode", 5, "uint32"],
      ["permissions", 6, "string"],
      ["owner", 7, "string"],
      ["group", 8, "string"],
      ["modified_time", 9, ".google.protobuf.Timestamp"],
      ["symlink_target", 10, "string", "optional"],
      ["metadata", 11, "EntryInfo.MetadataEntry", "map"],
    ],
    nested: { MetadataEntry: STRING_MAP },
  },
  ListDirRequest: {
    fields: [
      ["path", 1, "string"],
      ["depth", 2, "uint32"],
    ],
  },
  ListDirResponse: { fields: [["entries", 1, "EntryInfo", "repeated"]] },
  WatchDirRequest: { fields: WATCH_FIELDS },
  FilesystemEvent: {
    fields: [
      ["name", 1, "string"],
      ["type", 2, "EventType"],
      ["entry", 3, "EntryInfo", "optional"],
    ],
  },
  WatchDirResponse: {
    fields: [
      ["start", 1, "WatchDirResponse.StartEvent", "oneof:event"],
      ["filesystem", 2, "FilesystemEvent", "oneof:event"],
      ["keepalive", 3, "WatchDirResponse.KeepAlive", "oneof:event"],
    ],
    nested: { StartEvent: { fields: [] }, KeepAlive: { fields: [] } },
  },
  CreateWatcherRequest: { fields: WATCH_FIELDS },
  CreateWatcherResponse: { fields: [["watcher_id", 1, "string"]] },
  GetWatcherEventsRequest: { fields: [["watcher_id", 1, "string"]] },
  GetWatcherEventsResponse: { fields: [["events", 1, "FilesystemEvent", "repeated"]] },
  RemoveWatcherRequest: { fields: [["watcher_id", 1, "string"]] },
  RemoveWatcherResponse: { fields: [] },
};

function sizeMessage(): Message {
  return {
    fields: [
      ["cols", 1, "uint32"],
      ["rows", 2, "uint32"],
    ],
  };
}

/** An RPC: request and response message names, and whether the server streams its answer. */
export interface Method {
  input: string;
  output: string;
  serverStreaming?: boolean;
  clientStreaming?: boolean;
}

export const PROCESS_METHODS: Record<string, Method> = {
  List: { input: "ListRequest", output: "ListResponse" },
  Connect: { input: "ConnectRequest", output: "ConnectResponse", serverStreaming: true },
  Start: { input: "StartRequest", output: "StartResponse", serverStreaming: true },
  Update: { input: "UpdateRequest", output: "UpdateResponse" },
  StreamInput: {
    input: "StreamInputRequest",
    output: "StreamInputResponse",
    clientStreaming: true,
  },
  SendInput: { input: "SendInputRequest", output: "SendInputResponse" },
  SendSignal: { input: "SendSignalRequest", output: "SendSignalResponse" },
  CloseStdin: { input: "CloseStdinRequest", output: "CloseStdinResponse" },
};

export const FILESYSTEM_METHODS: Record<string, Method> = {
  Stat: { input: "StatRequest", output: "StatResponse" },
  MakeDir: { input: "MakeDirRequest", output: "MakeDirResponse" },
  Move: { input: "MoveRequest", output: "MoveResponse" },
  ListDir: { input: "ListDirRequest", output: "ListDirResponse" },
  Remove: { input: "RemoveRequest", output: "RemoveResponse" },
  WatchDir: { input: "WatchDirRequest", output: "WatchDirResponse", serverStreaming: true },
  CreateWatcher: { input: "CreateWatcherRequest", output: "CreateWatcherResponse" },
  GetWatcherEvents: { input: "GetWatcherEventsRequest", output: "GetWatcherEventsResponse" },
  RemoveWatcher: { input: "RemoveWatcherRequest", output: "RemoveWatcherResponse" },
};

const ENUMS: Record<"process" | "filesystem", Record<string, Record<string, number>>> = {
  process: { Signal: { SIGNAL_UNSPECIFIED: 0, SIGNAL_SIGTERM: 15, SIGNAL_SIGKILL: 9 } },
  filesystem: {
    FileType: {
      FILE_TYPE_UNSPECIFIED: 0,
      FILE_TYPE_FILE: 1,
      FILE_TYPE_DIRECTORY: 2,
      FILE_TYPE_SYMLINK: 3,
    },
    EventType: {
      EVENT_TYPE_UNSPECIFIED: 0,
      EVENT_TYPE_CREATE: 1,
      EVENT_TYPE_WRITE: 2,
      EVENT_TYPE_REMOVE: 3,
      EVENT_TYPE_RENAME: 4,
      EVENT_TYPE_CHMOD: 5,
    },
  },
};

function camel(name: string): string {
  return name.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase());
}

function messageProto(
  pkg: string,
  name: string,
  m: Message,
  enums: Set<string>,
  mapEntry = false,
): MessageInitShape<typeof DescriptorProtoSchema> {
  const oneofs: string[] = [];
  const synthetic: string[] = [];
  const fields: MessageInitShape<typeof FieldDescriptorProtoSchema>[] = m.fields.map(
    ([fname, number, type, flag]) => {
      const scalar = SCALARS[type];
      const ref = type.startsWith(".") ? type : `.${pkg}.${type}`;
      const isEnum = enums.has(type);
      const f: MessageInitShape<typeof FieldDescriptorProtoSchema> = {
        name: fname,
        jsonName: camel(fname),
        number,
        label: flag === "repeated" || flag === "map" ? Label.REPEATED : Label.OPTIONAL,
        type: scalar ?? (isEnum ? Type.ENUM : Type.MESSAGE),
        ...(scalar === undefined ? { typeName: ref } : {}),
      };
      if (flag?.startsWith("oneof:")) {
        const o = flag.slice(6);
        if (!oneofs.includes(o)) oneofs.push(o);
        f.oneofIndex = oneofs.indexOf(o);
      }
      if (flag === "optional") {
        synthetic.push(fname);
        f.proto3Optional = true;
      }
      return f;
    },
  );
  // Synthetic oneofs of proto3 optional fields come after the real ones, as protoc orders them.
  for (const [i, fname] of synthetic.entries()) {
    const f = fields.find((x) => x.name === fname)!;
    f.oneofIndex = oneofs.length + i;
  }
  const nested = Object.entries(m.nested ?? {}).map(([n, sub]) => {
    const isMap = m.fields.some(([, , t, fl]) => fl === "map" && t === `${name}.${n}`);
    return { ...messageProto(pkg, `${name}.${n}`, sub, enums, isMap), name: n };
  });
  return {
    name,
    field: fields,
    ...(mapEntry ? { options: { mapEntry: true } } : {}),
    oneofDecl: [...oneofs, ...synthetic.map((s) => `_${s}`)].map((n) => ({ name: n })),
    nestedType: nested,
  };
}

function fileProto(
  pkg: "process" | "filesystem",
  messages: Record<string, Message>,
  service: string,
  methods: Record<string, Method>,
) {
  const enumNames = new Set(Object.keys(ENUMS[pkg]));
  return create(FileDescriptorProtoSchema, {
    name: `${pkg}/${pkg}.proto`,
    package: pkg,
    syntax: "proto3",
    dependency: pkg === "filesystem" ? ["google/protobuf/timestamp.proto"] : [],
    messageType: Object.entries(messages).map(([n, m]) => messageProto(pkg, n, m, enumNames)),
    enumType: Object.entries(ENUMS[pkg]).map(([n, values]) => ({
      name: n,
      value: Object.entries(values).map(([vn, number]) => ({ name: vn, number })),
    })),
    service: [
      {
        name: service,
        method: Object.entries(methods).map(([n, m]) => ({
          name: n,
          inputType: `.${pkg}.${m.input}`,
          outputType: `.${pkg}.${m.output}`,
          serverStreaming: m.serverStreaming ?? false,
          clientStreaming: m.clientStreaming ?? false,
        })),
      },
    ],
  });
}

const registry: FileRegistry = createFileRegistry(
  createFileRegistry(fileProto("process", PROCESS, "Process", PROCESS_METHODS), () => undefined),
  createFileRegistry(
    fileProto("filesystem", FILESYSTEM, "Filesystem", FILESYSTEM_METHODS),
    (name) =>
      name === "google/protobuf/timestamp.proto" ? file_google_protobuf_timestamp : undefined,
  ),
);

/** The descriptor of a message by its full name (`process.StartRequest`). */
export function messageDesc(fullName: string): DescMessage {
  const d = registry.getMessage(fullName);
  if (!d) throw new Error(`envd message ${fullName} is not declared`);
  return d;
}

/** The services by their Connect path prefix, for the router and for clients in tests. */
export const SERVICES = {
  "process.Process": { pkg: "process", methods: PROCESS_METHODS },
  "filesystem.Filesystem": { pkg: "filesystem", methods: FILESYSTEM_METHODS },
} as const;

export function serviceDesc(name: keyof typeof SERVICES) {
  const d = registry.getService(name);
  if (!d) throw new Error(`envd service ${name} is not declared`);
  return d;
}

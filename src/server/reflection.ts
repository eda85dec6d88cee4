import {
  create,
  type DescEnum,
  type DescExtension,
  type DescFile,
  type DescMessage,
  type DescService,
  toBinary,
} from "@bufbuild/protobuf";
import { FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";
import { Code, type ConnectRouter } from "@connectrpc/connect";
import {
  ServerReflectionResponseSchema as ResponseV1Schema,
  ServerReflection as ServerReflectionV1,
} from "../../gen/grpc/reflection/v1/reflection_pb.js";
import {
  ServerReflectionResponseSchema as ResponseV1alphaSchema,
  ServerReflection as ServerReflectionV1alpha,
} from "../../gen/grpc/reflection/v1alpha/reflection_pb.js";

/** The two reflection services this module registers. */
export const reflectionServices: readonly DescService[] = [
  ServerReflectionV1,
  ServerReflectionV1alpha,
];

/**
 * Registers grpc.reflection.v1.ServerReflection and grpc.reflection.v1alpha.ServerReflection.
 *
 * The descriptors of `services` (their files and every transitive dependency) are indexed and
 * serialized once, here. Every other service registered on the same router (e.g.
 * grpc.health.v1.Health, the reflection services themselves) is added to the index once, on
 * the first reflection request, so that `list_services` names exactly what the server serves,
 * whatever the registration order.
 *
 * File answers carry the requested file first, then all its transitive dependencies, on every
 * request (the protocol allows omitting files already sent on the stream; we do not, so that
 * naive clients work). Lookup failures are answered with `error_response` (NOT_FOUND,
 * INVALID_ARGUMENT), never by failing the stream.
 */
export function registerReflection(
  router: ConnectRouter,
  services: readonly DescService[],
  /** Files served though no service imports them, e.g. the error detail types. */
  extraFiles: readonly DescFile[] = [],
): void {
  const index = new DescriptorIndex();
  for (const s of [...services, ...reflectionServices]) index.addService(s);
  for (const f of extraFiles) index.addFile(f);
  let routerIndexed = false;
  const current = (): DescriptorIndex => {
    if (!routerIndexed) {
      routerIndexed = true;
      for (const h of router.handlers) index.addService(h.service);
    }
    return index;
  };

  router.service(ServerReflectionV1, {
    async *serverReflectionInfo(requests) {
      for await (const req of requests) {
        const messageResponse = answer(current(), req);
        yield create(ResponseV1Schema, {
          validHost: req.host,
          originalRequest: req,
          messageResponse,
        });
      }
    },
  });
  router.service(ServerReflectionV1alpha, {
    async *serverReflectionInfo(requests) {
      for await (const req of requests) {
        const messageResponse = answer(current(), req);
        yield create(ResponseV1alphaSchema, {
          validHost: req.host,
          originalRequest: req,
          messageResponse,
        });
      }
    },
  });
}

/** The request fields both protocol versions share. */
interface ReflectionRequest {
  messageRequest:
    | {
        case:
          | "fileByFilename"
          | "fileContainingSymbol"
          | "allExtensionNumbersOfType"
          | "listServices";
        value: string;
      }
    | {
        case: "fileContainingExtension";
        value: { containingType: string; extensionNumber: number };
      }
    | { case: undefined; value?: undefined };
}

/** The response oneof, in a shape both protocol versions accept. */
type Answer =
  | { case: "fileDescriptorResponse"; value: { fileDescriptorProto: Uint8Array[] } }
  | {
      case: "allExtensionNumbersResponse";
      value: { baseTypeName: string; extensionNumber: number[] };
    }
  | { case: "listServicesResponse"; value: { service: { name: string }[] } }
  | { case: "errorResponse"; value: { errorCode: number; errorMessage: string } };

function answer(index: DescriptorIndex, req: ReflectionRequest): Answer {
  const r = req.messageRequest;
  switch (r.case) {
    case "listServices":
      return {
        case: "listServicesResponse",
        value: { service: index.serviceNames().map((name) => ({ name })) },
      };
    case "fileByFilename":
      return files(index.filesByName.get(r.value), `file not found: ${r.value}`);
    case "fileContainingSymbol": {
      const symbol = r.value.startsWith(".") ? r.value.slice(1) : r.value;
      return files(index.filesBySymbol.get(symbol), `symbol not found: ${symbol}`);
    }
    case "fileContainingExtension": {
      const { containingType, extensionNumber } = r.value;
      return files(
        index.extensions.get(containingType)?.get(extensionNumber),
        `extension not found: ${containingType} field ${extensionNumber}`,
      );
    }
    case "allExtensionNumbersOfType": {
      if (!index.messageTypes.has(r.value))
        return error(Code.NotFound, `type not found: ${r.value}`);
      const numbers = [...(index.extensions.get(r.value)?.keys() ?? [])].sort((a, b) => a - b);
      return {
        case: "allExtensionNumbersResponse",
        value: { baseTypeName: r.value, extensionNumber: numbers },
      };
    }
    case undefined:
      return error(Code.InvalidArgument, "the request sets no message_request");
  }
}

function files(entry: IndexedFile | undefined, notFound: string): Answer {
  if (entry === undefined) return error(Code.NotFound, notFound);
  return {
    case: "fileDescriptorResponse",
    value: { fileDescriptorProto: [...entry.withDependencies] },
  };
}

function error(code: Code, errorMessage: string): Answer {
  return { case: "errorResponse", value: { errorCode: code, errorMessage } };
}

interface IndexedFile {
  /** The serialized FileDescriptorProto of the file, then of each transitive dependency once. */
  withDependencies: readonly Uint8Array[];
}

/**
 * Files by name, symbol and extension, each file serialized once. Symbols are the fully-qualified
 * names of services, methods, messages, fields, oneofs, enums, enum values and extensions.
 */
class DescriptorIndex {
  readonly filesByName = new Map<string, IndexedFile>();
  readonly filesBySymbol = new Map<string, IndexedFile>();
  readonly messageTypes = new Set<string>();
  /** Extendee type name → field number → the file declaring the extension. */
  readonly extensions = new Map<string, Map<number, IndexedFile>>();
  private readonly services = new Set<string>();
  private readonly closures = new Map<string, readonly string[]>();
  private readonly bytes = new Map<string, Uint8Array>();

  addService(service: DescService): void {
    this.services.add(service.typeName);
    this.addFile(service.file);
  }

  serviceNames(): string[] {
    return [...this.services].sort();
  }

  addFile(file: DescFile): void {
    // DescFile.name lacks the ".proto" suffix; reflection speaks in proto file names.
    const name = file.proto.name;
    if (this.filesByName.has(name)) return;
    for (const dep of file.dependencies) this.addFile(dep);
    this.bytes.set(name, toBinary(FileDescriptorProtoSchema, file.proto));
    const closure = new Set([name]);
    for (const dep of file.dependencies) {
      for (const n of this.closures.get(dep.proto.name) ?? []) closure.add(n);
    }
    this.closures.set(name, [...closure]);
    const entry: IndexedFile = {
      withDependencies: [...closure].map((n) => this.bytes.get(n)!),
    };
    this.filesByName.set(name, entry);

    for (const s of file.services) {
      this.filesBySymbol.set(s.typeName, entry);
      for (const m of s.methods) this.filesBySymbol.set(`${s.typeName}.${m.name}`, entry);
    }
    for (const m of file.messages) this.addMessage(m, entry);
    for (const e of file.enums) this.addEnum(e, entry);
    for (const x of file.extensions) this.addExtension(x, entry);
  }

  private addMessage(message: DescMessage, entry: IndexedFile): void {
    this.messageTypes.add(message.typeName);
    this.filesBySymbol.set(message.typeName, entry);
    for (const f of message.fields) this.filesBySymbol.set(`${message.typeName}.${f.name}`, entry);
    for (const o of message.oneofs) this.filesBySymbol.set(`${message.typeName}.${o.name}`, entry);
    for (const m of message.nestedMessages) this.addMessage(m, entry);
    for (const e of message.nestedEnums) this.addEnum(e, entry);
    for (const x of message.nestedExtensions) this.addExtension(x, entry);
  }

  private addEnum(desc: DescEnum, entry: IndexedFile): void {
    this.filesBySymbol.set(desc.typeName, entry);
    // Enum values are scoped like siblings of their enum (C++ scoping rules).
    const scope = desc.typeName.slice(0, desc.typeName.length - desc.name.length);
    for (const v of desc.values) this.filesBySymbol.set(`${scope}${v.name}`, entry);
  }

  private addExtension(ext: DescExtension, entry: IndexedFile): void {
    this.filesBySymbol.set(ext.typeName, entry);
    let byNumber = this.extensions.get(ext.extendee.typeName);
    if (byNumber === undefined) {
      byNumber = new Map();
      this.extensions.set(ext.extendee.typeName, byNumber);
    }
    byNumber.set(ext.number, entry);
  }
}

/**
 * gRPC server reflection (grpc.reflection.v1 and v1alpha) for a Connect router, so that
 * `buf curl`, grpcurl, Postman and similar tools can discover services without local protos.
 */
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import type { DescFile, DescMessage, MessageInitShape } from "@bufbuild/protobuf";
import { FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";
import { Code } from "@connectrpc/connect";
import type { ConnectRouter } from "@connectrpc/connect";
import {
  ServerReflection,
  ServerReflectionRequestSchema,
  ServerReflectionResponseSchema,
} from "../gen/grpc/reflection/v1/reflection_pb.js";
import type { ServerReflectionRequest, ServerReflectionResponse } from "../gen/grpc/reflection/v1/reflection_pb.js";
import * as v1alpha from "../gen/grpc/reflection/v1alpha/reflection_pb.js";

/** Options of {@link registerReflection}. */
export interface ReflectionOptions {
  /**
   * Files to make discoverable beyond those of the services on the router (and their imports),
   * e.g. a file that only declares extensions. Their transitive imports are included too.
   */
  readonly files?: Iterable<DescFile>;
}

type MessageResponse = MessageInitShape<typeof ServerReflectionResponseSchema>["messageResponse"];

/**
 * Registers the gRPC server reflection service on `router`, under both `grpc.reflection.v1` and
 * the older `grpc.reflection.v1alpha` that many clients still try first.
 *
 * What is exposed is read from the router itself, lazily: every service on the router when a
 * reflection request arrives (the reflection services included, and any registered after this
 * call), the files that declare them, `options.files`, and all their transitive imports.
 *
 * Each request on the stream gets exactly one response, echoing `host` as `valid_host` and the
 * request as `original_request`:
 * - `list_services`: the full names of all services, sorted.
 * - `file_containing_symbol`: the declaring file of a service, method, message, field, oneof,
 *   enum, enum value or extension, followed by all its transitive imports (every time, even if
 *   already sent on this stream). `file_by_filename` and `file_containing_extension` likewise.
 * - `all_extension_numbers_of_type`: the known extension numbers of a message type, ascending.
 * - Anything not found gets an `error_response` with code 5 (NOT_FOUND); a request with no
 *   question set gets code 3 (INVALID_ARGUMENT). Errors never end the stream.
 *
 * @returns the router, for chaining.
 */
export function registerReflection(router: ConnectRouter, options: ReflectionOptions = {}): ConnectRouter {
  const extraFiles = [...(options.files ?? [])];
  let cached: { handlerCount: number; index: DescriptorIndex } | undefined;
  const currentIndex = (): DescriptorIndex => {
    // router.handlers only grows, so its length tells whether services were added since.
    if (cached?.handlerCount !== router.handlers.length) {
      const services = router.handlers.map((h) => h.service);
      cached = {
        handlerCount: router.handlers.length,
        index: new DescriptorIndex(
          services.map((s) => s.typeName),
          [...services.map((s) => s.file), ...extraFiles],
        ),
      };
    }
    return cached.index;
  };

  router.service(ServerReflection, {
    serverReflectionInfo: (requests) => serveReflection(requests, currentIndex),
  });
  router.service(v1alpha.ServerReflection, {
    serverReflectionInfo: (requests) => serveReflectionV1alpha(requests, currentIndex),
  });
  return router;
}

/** Answers a v1 reflection stream, one response per request. */
async function* serveReflection(
  requests: AsyncIterable<ServerReflectionRequest>,
  currentIndex: () => DescriptorIndex,
): AsyncIterable<ServerReflectionResponse> {
  for await (const request of requests) {
    yield create(ServerReflectionResponseSchema, {
      validHost: request.host,
      originalRequest: request,
      messageResponse: answer(request, currentIndex()),
    });
  }
}

/** v1alpha has the same wire format as v1, so translate through the binary encoding. */
async function* serveReflectionV1alpha(
  requests: AsyncIterable<v1alpha.ServerReflectionRequest>,
  currentIndex: () => DescriptorIndex,
): AsyncIterable<v1alpha.ServerReflectionResponse> {
  async function* asV1() {
    for await (const request of requests) {
      yield fromBinary(ServerReflectionRequestSchema, toBinary(v1alpha.ServerReflectionRequestSchema, request));
    }
  }
  for await (const response of serveReflection(asV1(), currentIndex)) {
    yield fromBinary(v1alpha.ServerReflectionResponseSchema, toBinary(ServerReflectionResponseSchema, response));
  }
}

function answer(request: ServerReflectionRequest, index: DescriptorIndex): MessageResponse {
  const question = request.messageRequest;
  switch (question.case) {
    case "listServices":
      return {
        case: "listServicesResponse",
        value: { service: index.serviceNames.map((name) => ({ name })) },
      };
    case "fileByFilename":
      return fileResponse(index.fileByName(question.value), `file "${question.value}" not found`);
    case "fileContainingSymbol":
      return fileResponse(index.fileBySymbol(question.value), `symbol "${question.value}" not found`);
    case "fileContainingExtension": {
      const { containingType, extensionNumber } = question.value;
      return fileResponse(
        index.fileByExtension(containingType, extensionNumber),
        `extension ${extensionNumber} of "${containingType}" not found`,
      );
    }
    case "allExtensionNumbersOfType": {
      const numbers = index.extensionNumbers(question.value);
      if (numbers === undefined) {
        return errorResponse(Code.NotFound, `message type "${question.value}" not found`);
      }
      return {
        case: "allExtensionNumbersResponse",
        value: { baseTypeName: question.value, extensionNumber: numbers },
      };
    }
    case undefined:
      return errorResponse(Code.InvalidArgument, "no message_request set (or one this server does not know)");
  }
}

function fileResponse(file: DescFile | undefined, notFound: string): MessageResponse {
  if (file === undefined) {
    return errorResponse(Code.NotFound, notFound);
  }
  return {
    case: "fileDescriptorResponse",
    value: { fileDescriptorProto: withImports(file).map(serializeFile) },
  };
}

function errorResponse(code: Code, message: string): MessageResponse {
  return { case: "errorResponse", value: { errorCode: code, errorMessage: message } };
}

/** The file followed by its transitive imports, each once, in breadth-first order. */
function withImports(file: DescFile): DescFile[] {
  const ordered = [file];
  const seen = new Set(ordered);
  for (let i = 0; i < ordered.length; i++) {
    for (const dependency of ordered[i].dependencies) {
      if (!seen.has(dependency)) {
        seen.add(dependency);
        ordered.push(dependency);
      }
    }
  }
  return ordered;
}

const serialized = new WeakMap<DescFile, Uint8Array>();

function serializeFile(file: DescFile): Uint8Array {
  let bytes = serialized.get(file);
  if (bytes === undefined) {
    bytes = toBinary(FileDescriptorProtoSchema, file.proto);
    serialized.set(file, bytes);
  }
  return bytes;
}

/** Lookups over a closed set of files: by file name, by symbol, and by extension. */
class DescriptorIndex {
  readonly serviceNames: string[];
  readonly #files = new Map<string, DescFile>();
  readonly #symbols = new Map<string, DescFile>();
  readonly #messages = new Set<string>();
  /** Extended message type name → extension number → declaring file. */
  readonly #extensions = new Map<string, Map<number, DescFile>>();

  constructor(serviceNames: Iterable<string>, roots: Iterable<DescFile>) {
    this.serviceNames = [...new Set(serviceNames)].sort();
    for (const root of roots) {
      for (const file of withImports(root)) {
        this.#addFile(file);
      }
    }
  }

  fileByName(name: string): DescFile | undefined {
    return this.#files.get(name);
  }

  fileBySymbol(fullName: string): DescFile | undefined {
    return this.#symbols.get(fullName.startsWith(".") ? fullName.slice(1) : fullName);
  }

  fileByExtension(extendee: string, number: number): DescFile | undefined {
    return this.#extensions.get(extendee)?.get(number);
  }

  /** Extension numbers of a message type, ascending; undefined if the type is unknown. */
  extensionNumbers(typeName: string): number[] | undefined {
    if (!this.#messages.has(typeName)) {
      return undefined;
    }
    return [...(this.#extensions.get(typeName)?.keys() ?? [])].sort((a, b) => a - b);
  }

  #addFile(file: DescFile): void {
    if (this.#files.has(file.proto.name)) {
      return;
    }
    this.#files.set(file.proto.name, file);
    const pkg = file.proto.package;
    for (const service of file.services) {
      this.#addSymbol(service.typeName, file);
      for (const method of service.methods) {
        this.#addSymbol(`${service.typeName}.${method.name}`, file);
      }
    }
    for (const message of file.messages) {
      this.#addMessage(message, file);
    }
    for (const enumeration of file.enums) {
      this.#addSymbol(enumeration.typeName, file);
      for (const value of enumeration.values) {
        this.#addSymbol(qualify(pkg, value.name), file);
      }
    }
    for (const extension of file.extensions) {
      this.#addExtension(extension.typeName, extension.extendee.typeName, extension.number, file);
    }
  }

  #addMessage(message: DescMessage, file: DescFile): void {
    this.#addSymbol(message.typeName, file);
    this.#messages.add(message.typeName);
    for (const field of message.fields) {
      this.#addSymbol(`${message.typeName}.${field.name}`, file);
    }
    for (const oneof of message.oneofs) {
      this.#addSymbol(`${message.typeName}.${oneof.name}`, file);
    }
    for (const nested of message.nestedMessages) {
      this.#addMessage(nested, file);
    }
    for (const enumeration of message.nestedEnums) {
      this.#addSymbol(enumeration.typeName, file);
      // Enum values are scoped as siblings of their enum, not inside it.
      for (const value of enumeration.values) {
        this.#addSymbol(`${message.typeName}.${value.name}`, file);
      }
    }
    for (const extension of message.nestedExtensions) {
      this.#addExtension(extension.typeName, extension.extendee.typeName, extension.number, file);
    }
  }

  #addExtension(typeName: string, extendee: string, number: number, file: DescFile): void {
    this.#addSymbol(typeName, file);
    let byNumber = this.#extensions.get(extendee);
    if (byNumber === undefined) {
      byNumber = new Map();
      this.#extensions.set(extendee, byNumber);
    }
    if (!byNumber.has(number)) {
      byNumber.set(number, file);
    }
  }

  #addSymbol(fullName: string, file: DescFile): void {
    if (!this.#symbols.has(fullName)) {
      this.#symbols.set(fullName, file);
    }
  }
}

function qualify(pkg: string, name: string): string {
  return pkg === "" ? name : `${pkg}.${name}`;
}

import { fromBinary } from "@bufbuild/protobuf";
import { BinaryReader, WireType } from "@bufbuild/protobuf/wire";
import { AnySchema, anyUnpack } from "@bufbuild/protobuf/wkt";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { type ErrorInfo, ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";

/**
 * A `@grpc/grpc-js` client for IdentityService compiled at run time from the
 * `.proto` sources by `@grpc/proto-loader`, the way a team outside this
 * repository (or in another language) would build its client: from `proto/`
 * with its imports in `third_party/`, not from `gen/`.
 */

/** The messages as proto-loader decodes them: proto field names, defaults filled in. */
export interface GrpcJsLoginResponse {
  token: string;
  token_type: string;
  expires_in: number;
}
export interface GrpcJsValidateResponse {
  valid: boolean;
  reason: string;
  user_id: string;
  username: string;
  roles: string[];
  expires_at: { seconds: string; nanos: number } | null;
}

export interface UnaryResult<T> {
  message: T;
  header: grpc.Metadata;
}

export interface IdentityGrpcJsClient {
  client: grpc.Client;
  login(
    req: { username: string; password: string },
    metadata?: Record<string, string>,
  ): Promise<UnaryResult<GrpcJsLoginResponse>>;
  validate(metadata?: Record<string, string>): Promise<UnaryResult<GrpcJsValidateResponse>>;
  close(): void;
}

type UnaryMethod = (
  request: object,
  metadata: grpc.Metadata,
  callback: (err: grpc.ServiceError | null, response?: unknown) => void,
) => grpc.ClientUnaryCall;

export function createIdentityGrpcJsClient(
  address: string,
  credentials: grpc.ChannelCredentials,
): IdentityGrpcJsClient {
  const definition = protoLoader.loadSync("traitgate/identity/v1/identity.proto", {
    includeDirs: ["proto", "third_party"],
    keepCase: true,
    longs: String,
    enums: String,
    defaults: true,
    oneofs: true,
  });
  const loaded = grpc.loadPackageDefinition(definition) as unknown as {
    traitgate: { identity: { v1: { IdentityService: grpc.ServiceClientConstructor } } };
  };
  const client = new loaded.traitgate.identity.v1.IdentityService(address, credentials);

  function unary<T>(
    name: "Login" | "Validate",
    request: object,
    metadata: Record<string, string> = {},
  ): Promise<UnaryResult<T>> {
    const md = new grpc.Metadata();
    for (const [key, value] of Object.entries(metadata)) md.set(key, value);
    const method = (client as unknown as Record<string, UnaryMethod>)[name];
    if (!method) throw new Error(`proto-loader produced no method ${name}`);
    return new Promise((resolve, reject) => {
      let header = new grpc.Metadata();
      const call = method.call(client, request, md, (err, response) => {
        if (err) reject(err);
        else resolve({ message: response as T, header });
      });
      call.on("metadata", (m: grpc.Metadata) => {
        header = m;
      });
    });
  }

  return {
    client,
    login: (req, metadata) => unary("Login", req, metadata),
    validate: (metadata) => unary("Validate", {}, metadata),
    close: () => client.close(),
  };
}

/** google.rpc.Status as carried in the `grpc-status-details-bin` trailer. */
export interface RpcStatus {
  code: number;
  message: string;
  errorInfo: ErrorInfo[];
}

/**
 * Decodes the `grpc-status-details-bin` trailer of a failed grpc-js call.
 *
 * `google/rpc/status.proto` is not part of `gen/` (nothing imports it), so the
 * three fields of google.rpc.Status (`int32 code = 1; string message = 2;
 * repeated google.protobuf.Any details = 3`) are read with the wire reader,
 * and each Any is unpacked with the generated ErrorInfo schema.
 */
export function statusDetails(err: unknown): RpcStatus {
  const metadata = (err as Partial<grpc.ServiceError>).metadata;
  const raw = metadata?.get("grpc-status-details-bin")[0];
  if (!(raw instanceof Buffer))
    throw new Error("no grpc-status-details-bin trailer", { cause: err });
  const status: RpcStatus = { code: 0, message: "", errorInfo: [] };
  const reader = new BinaryReader(raw);
  while (reader.pos < reader.len) {
    const [field, wireType] = reader.tag();
    if (field === 1 && wireType === WireType.Varint) status.code = reader.int32();
    else if (field === 2 && wireType === WireType.LengthDelimited) status.message = reader.string();
    else if (field === 3 && wireType === WireType.LengthDelimited) {
      const info = anyUnpack(fromBinary(AnySchema, reader.bytes()), ErrorInfoSchema);
      if (info) status.errorInfo.push(info);
    } else reader.skip(wireType);
  }
  return status;
}

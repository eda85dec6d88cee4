import { execFile } from "node:child_process";
import * as http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { promisify } from "node:util";
import { createFileRegistry, fromBinary } from "@bufbuild/protobuf";
import { FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";
import type { ConnectRouter } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { file_google_rpc_error_details } from "../../gen/google/rpc/error_details_pb.js";
import { IdentityService } from "../../gen/traitgate/identity/v1/identity_pb.js";
import { toolPath } from "../../scripts/tools.mjs";
import { registerHealth } from "../../src/server/health.js";
import { registerReflection } from "../../src/server/reflection.js";

const run = promisify(execFile);
const identity = "traitgate.identity.v1.IdentityService";

function routes(router: ConnectRouter): void {
  router.service(IdentityService, {
    login: async () => ({ token: "t", tokenType: "Bearer", expiresIn: 1 }),
    validate: async () => ({ valid: false, reason: "missing" }),
    getJwks: async () => ({ keys: [] }),
  });
  registerReflection(router, [IdentityService], [file_google_rpc_error_details]);
  registerHealth(router, [identity], { check: async () => "SERVING" });
}

let server: http2.Http2Server;
let base: string;
const sessions = new Set<http2.ServerHttp2Session>();

beforeAll(async () => {
  server = http2.createServer(connectNodeAdapter({ routes }));
  server.on("session", (s) => {
    sessions.add(s);
    s.on("close", () => sessions.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  base = `127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  for (const s of sessions) s.destroy();
  await new Promise((resolve) => server.close(resolve));
});

describe("reflection with buf curl (no --schema)", () => {
  const buf = async (...args: string[]): Promise<string> => {
    const { stdout } = await run(toolPath("buf"), ["curl", "--http2-prior-knowledge", ...args], {
      timeout: 30_000,
    });
    return stdout;
  };

  it("calls Login over gRPC with the schema from reflection v1", async () => {
    const out = await buf(
      "--protocol",
      "grpc",
      "--reflect-protocol",
      "grpc-v1",
      `http://${base}/${identity}/Login`,
      "-d",
      '{"username":"a","password":"b"}',
    );
    expect(JSON.parse(out)).toEqual({ token: "t", tokenType: "Bearer", expiresIn: 1 });
  });

  it("calls Validate over Connect with the schema from reflection v1alpha", async () => {
    const out = await buf(
      "--reflect-protocol",
      "grpc-v1alpha",
      "--emit-defaults",
      `http://${base}/${identity}/Validate`,
    );
    expect(JSON.parse(out)).toMatchObject({ valid: false, reason: "missing" });
  });

  it("lists services and methods", async () => {
    const services = (await buf("--list-services", `http://${base}`)).trim().split("\n");
    expect(services).toEqual(
      expect.arrayContaining([
        identity,
        "grpc.health.v1.Health",
        "grpc.reflection.v1.ServerReflection",
        "grpc.reflection.v1alpha.ServerReflection",
      ]),
    );
    const methods = (await buf("--list-methods", `http://${base}`)).trim().split("\n");
    expect(methods).toEqual(
      expect.arrayContaining([`${identity}/Login`, `${identity}/Validate`, `${identity}/GetJwks`]),
    );
  });
});

describe("reflection with a grpc-js client", () => {
  interface Reply {
    valid_host: string;
    original_request: Record<string, unknown>;
    message_response: string;
    file_descriptor_response?: { file_descriptor_proto: Buffer[] };
    list_services_response?: { service: { name: string }[] };
    all_extension_numbers_response?: { base_type_name: string; extension_number: number[] };
    error_response?: { error_code: number; error_message: string };
  }
  let client: grpc.Client;
  let v1alphaClient: grpc.Client;

  beforeAll(() => {
    const options = {
      includeDirs: ["third_party", "proto"],
      keepCase: true,
      longs: String,
      enums: String,
      oneofs: true,
    };
    const load = (file: string) => grpc.loadPackageDefinition(protoLoader.loadSync(file, options));
    type Ctor = grpc.ServiceClientConstructor;
    const v1 = load("grpc/reflection/v1/reflection.proto") as {
      grpc: { reflection: { v1: Record<string, Ctor> } };
    };
    const alpha = load("grpc/reflection/v1alpha/reflection.proto") as {
      grpc: { reflection: { v1alpha: Record<string, Ctor> } };
    };
    client = new v1.grpc.reflection.v1.ServerReflection!(base, grpc.credentials.createInsecure());
    v1alphaClient = new alpha.grpc.reflection.v1alpha.ServerReflection!(
      base,
      grpc.credentials.createInsecure(),
    );
  });

  afterAll(() => {
    client.close();
    v1alphaClient.close();
  });

  /** Sends all requests on one stream and collects one reply per request. */
  function ask(c: grpc.Client, requests: object[]): Promise<Reply[]> {
    return new Promise((resolve, reject) => {
      const call = (
        c as unknown as Record<string, () => grpc.ClientDuplexStream<object, Reply>>
      ).ServerReflectionInfo!.call(c);
      const replies: Reply[] = [];
      call.on("data", (r: Reply) => replies.push(r));
      call.on("error", reject);
      call.on("end", () => resolve(replies));
      for (const r of requests) call.write(r);
      call.end();
    });
  }

  const fileNames = (r: Reply | undefined) =>
    (r?.file_descriptor_response?.file_descriptor_proto ?? []).map((b) =>
      fromBinary(FileDescriptorProtoSchema, b),
    );

  it("answers many requests on one stream, echoing host and request", async () => {
    const replies = await ask(client, [
      { host: "h1", list_services: "" },
      { host: "h2", file_containing_symbol: "traitgate.identity.v1.LoginRequest" },
      { host: "h3", file_containing_symbol: "traitgate.identity.v1.NoSuchThing" },
    ]);
    expect(replies).toHaveLength(3);
    const [list, symbol, missing] = replies;
    expect(list?.valid_host).toBe("h1");
    expect(list?.original_request).toMatchObject({ host: "h1", list_services: "" });
    expect(list?.list_services_response?.service.map((s) => s.name)).toEqual(
      expect.arrayContaining([
        identity,
        "grpc.reflection.v1.ServerReflection",
        "grpc.reflection.v1alpha.ServerReflection",
      ]),
    );

    expect(symbol?.original_request).toMatchObject({
      file_containing_symbol: "traitgate.identity.v1.LoginRequest",
    });
    const files = fileNames(symbol);
    expect(files[0]?.name).toBe("traitgate/identity/v1/identity.proto");
    expect(files[0]?.messageType.map((m) => m.name)).toContain("LoginRequest");
    expect(files.map((f) => f.name)).toEqual(
      expect.arrayContaining([
        "buf/validate/validate.proto",
        "google/api/annotations.proto",
        "google/api/http.proto",
        "google/protobuf/descriptor.proto",
        "google/protobuf/duration.proto",
        "google/protobuf/timestamp.proto",
      ]),
    );
    expect(new Set(files.map((f) => f.name)).size).toBe(files.length);
    // The answer is self-contained (requested file first, then its dependencies, as grpc-go
    // does): a registry builds from it alone.
    const registry = createFileRegistry(files[0]!, (name) => files.find((f) => f.name === name));
    expect(
      registry.getMessage("traitgate.identity.v1.LoginRequest")?.fields.map((f) => f.name),
    ).toEqual(["username", "password", "totp_code"]);

    expect(missing?.message_response).toBe("error_response");
    expect(missing?.error_response?.error_code).toBe(grpc.status.NOT_FOUND);
  });

  it("finds methods, nested symbols, files by name and extensions", async () => {
    const replies = await ask(client, [
      { file_containing_symbol: `${identity}.Login` },
      { file_by_filename: "buf/validate/validate.proto" },
      { file_by_filename: "no/such.proto" },
      {
        file_containing_extension: {
          containing_type: "google.protobuf.FieldOptions",
          extension_number: 1159,
        },
      },
      { all_extension_numbers_of_type: "google.protobuf.MethodOptions" },
      { all_extension_numbers_of_type: "no.such.Type" },
      { file_containing_symbol: "grpc.health.v1.HealthCheckResponse.ServingStatus" },
      { file_containing_symbol: "grpc.health.v1.HealthCheckResponse.SERVICE_UNKNOWN" },
      { host: "no query" },
    ]);
    expect(fileNames(replies[0])[0]?.name).toBe("traitgate/identity/v1/identity.proto");
    const validate = fileNames(replies[1]);
    expect(validate[0]?.name).toBe("buf/validate/validate.proto");
    expect(validate.map((f) => f.name)).toContain("google/protobuf/descriptor.proto");
    expect(replies[2]?.error_response?.error_code).toBe(grpc.status.NOT_FOUND);
    expect(fileNames(replies[3])[0]?.name).toBe("buf/validate/validate.proto");
    expect(replies[4]?.all_extension_numbers_response).toEqual({
      base_type_name: "google.protobuf.MethodOptions",
      extension_number: expect.arrayContaining([72295728]),
    });
    expect(replies[5]?.error_response?.error_code).toBe(grpc.status.NOT_FOUND);
    // Health was not passed to registerReflection, but is registered on the same router.
    expect(fileNames(replies[6])[0]?.name).toBe("grpc/health/v1/health.proto");
    expect(fileNames(replies[7])[0]?.name).toBe("grpc/health/v1/health.proto");
    expect(replies[8]?.error_response?.error_code).toBe(grpc.status.INVALID_ARGUMENT);
  });

  it("serves extra files no service imports (error detail types)", async () => {
    const [reply] = await ask(client, [{ file_containing_symbol: "google.rpc.ErrorInfo" }]);
    expect(fileNames(reply)[0]?.name).toBe("google/rpc/error_details.proto");
  });

  it("serves v1alpha too", async () => {
    const [reply] = await ask(v1alphaClient, [
      { file_containing_symbol: "google.protobuf.Timestamp" },
    ]);
    expect(fileNames(reply).map((f) => f.name)).toEqual(["google/protobuf/timestamp.proto"]);
  });
});

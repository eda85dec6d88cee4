import { EventEmitter } from "node:events";
import { create } from "@bufbuild/protobuf";
import {
  Code,
  ConnectError,
  createConnectRouter,
  createContextValues,
  type Interceptor,
} from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import {
  TranscodingTestService,
  type WhoAmIRequestSchema,
} from "../../gen/traitgate/testing/v1/transcoding_pb.js";
import { CallSignal, UnaryMethods } from "../../src/server/unary.js";

/**
 * The in-process chain (src/server/unary.ts) with interceptors that hand on a request of
 * their own: a spread of the request keeps the call's state (protocol, deadline, the headers
 * the handler sets before it throws); a request built anew without it is refused as Internal,
 * not served with those lost.
 */

function methodsWith(interceptor: Interceptor) {
  const methods = new UnaryMethods([interceptor]);
  methods.recording(createConnectRouter()).service(TranscodingTestService, {
    fail(request, ctx) {
      ctx.responseHeader.set("x-before-throw", "1");
      throw new ConnectError(request.message, Code.PermissionDenied);
    },
    whoAmI(_request, ctx) {
      ctx.responseHeader.set("x-protocol", ctx.protocolName);
      ctx.responseHeader.set("x-deadline", String(ctx.timeoutMs() !== undefined));
      return { requestMethod: ctx.requestMethod };
    },
  });
  return methods;
}

function invoke(methods: UnaryMethods, name: "WhoAmI" | "Fail") {
  const spec = methods.get(`/traitgate.testing.v1.TranscodingTestService/${name}`);
  if (spec === undefined) throw new Error(`no ${name}`);
  const call = new CallSignal(new EventEmitter());
  call.setDeadline(5_000);
  return methods.invoke(spec, create(spec.method.input as typeof WhoAmIRequestSchema), {
    protocolName: "grpc",
    requestHeader: new Headers(),
    url: "http://localhost/",
    call,
    contextValues: createContextValues(),
  });
}

const spread: Interceptor = (next) => (req) =>
  next({ ...req, header: new Headers(req.header) } as typeof req);

const anew: Interceptor = (next) => (req) =>
  next({
    stream: req.stream,
    message: req.message,
    method: req.method,
    service: req.service,
    requestMethod: req.requestMethod,
    url: req.url,
    signal: req.signal,
    header: req.header,
    contextValues: req.contextValues,
  } as typeof req);

describe("interceptors that hand on a request of their own", () => {
  it("a spread request keeps the protocol, the deadline and the headers set before a throw", async () => {
    const methods = methodsWith(spread);
    const outcome = await invoke(methods, "WhoAmI");
    expect(outcome.header.get("x-protocol")).toBe("grpc");
    expect(outcome.header.get("x-deadline")).toBe("true");
    const failed = await invoke(methods, "Fail").catch((err: unknown) => err);
    expect(failed).toBeInstanceOf(ConnectError);
    expect((failed as ConnectError).code).toBe(Code.PermissionDenied);
    expect((failed as ConnectError).metadata.get("x-before-throw")).toBe("1");
  });

  it("a request built without the call's state is refused as Internal", async () => {
    const failed = await invoke(methodsWith(anew), "WhoAmI").catch((err: unknown) => err);
    expect(failed).toBeInstanceOf(ConnectError);
    expect((failed as ConnectError).code).toBe(Code.Internal);
    expect((failed as ConnectError).rawMessage).toMatch(/without its call state/);
  });
});

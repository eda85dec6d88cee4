import type { IncomingMessage, ServerResponse } from "node:http";
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import {
  createRegistry,
  type DescMessage,
  type DescService,
  type JsonValue,
  type MessageShape,
} from "@bufbuild/protobuf";
import { file_google_protobuf_struct } from "@bufbuild/protobuf/wkt";
import { file_buf_validate_validate } from "@bufbuild/protovalidate/gen/buf/validate/validate_pb.js";
import {
  Code,
  ConnectError,
  type ConnectRouter,
  createConnectRouter,
  createContextValues,
} from "@connectrpc/connect";
import type { UniversalHandler } from "@connectrpc/connect/protocol";
import {
  compressionBrotli,
  compressionGzip,
  universalRequestFromNodeRequest,
  universalResponseToNodeResponse,
} from "@connectrpc/connect-node";
import { createValidateInterceptor } from "@connectrpc/validate";
import { file_google_rpc_error_details } from "../../gen/google/rpc/error_details_pb.js";
import { Health } from "../../gen/grpc/health/v1/health_pb.js";
import type { Logger } from "../log.js";
import { type CallEndOptions, createCallEnd } from "./call-end.js";
import { markHandled, noteAnswered, noteOutcome, protocolOf, startCall } from "./call-record.js";
import { isConnectJsonUnary, readConnectJson, sendConnectError } from "./connect-json.js";
import {
  type CallRecord,
  callRecordKey,
  clientAddressKey,
  requestIdKey,
  userAgentKey,
} from "./context.js";
import { createCors } from "./cors.js";
import { isPlainGrpc, serveGrpcUnary } from "./grpc-unary.js";
import { type HealthChecker, registerHealth } from "./health.js";
import {
  type ApiKeyVerifier,
  type Authenticator,
  type AuthRule,
  createAuthInterceptor,
  createRequestInterceptor,
  publicMethod,
  type RefusedCall,
} from "./interceptors.js";
import { createOpenApiEndpoint, openApiPath } from "./openapi.js";
import { createOriginResolver, parseTrustedProxies } from "./origin.js";
import { createSchemaValidator } from "./pattern-match.js";
import { reflectionServices, registerReflection } from "./reflection.js";
import { joinRepeatedAuthorization } from "./request-headers.js";
import { RestError, restErrorResponse } from "./transcoder/errors.js";
import { createRestTranscoder, invokeFromHttp, listRestRoutes } from "./transcoder/index.js";
import { UnaryMethods, type UnaryOutcome } from "./unary.js";

export type NodeRequest = IncomingMessage | Http2ServerRequest;
export type NodeResponse = ServerResponse | Http2ServerResponse;
export type RequestListener = (req: NodeRequest, res: NodeResponse) => void;

/** One area's contribution to the server: its services and how each method is protected. */
export interface ServiceModule {
  services: readonly DescService[];
  register(router: ConnectRouter): void;
  authRules: ReadonlyMap<string, AuthRule>;
  /**
   * Records refusals of this module's methods in its own way (the gateway writes
   * them as operator_call events) instead of the app's `onRefused`; unlike that one, also
   * told of calls refused before their method ran for other reasons (RefusedCall.stage).
   */
  onRefused?: (call: RefusedCall) => Promise<void>;
  /** Requests to one of the module's REST paths that it answers in a shape of its own. */
  httpRoutes?: readonly HttpRoute[];
}

/**
 * A request on one path that a module decodes and answers itself (OAuth's form-encoded
 * token request), still through its method behind the same interceptors; the requests it
 * does not take go on to the REST transcoder.
 */
export interface HttpRoute {
  /** The exact path, e.g. "/auth/token". */
  path: string;
  /** Whether this route answers the request (by its method and content type). */
  takes(req: NodeRequest): boolean;
  /** Answers it; resolves once answered (or once the client is gone). */
  serve(req: NodeRequest, res: NodeResponse, call: HttpRouteCall): Promise<void>;
}

export interface HttpRouteCall {
  /** The call's record (route and outcome go in it, for the access log and metrics). */
  record: CallRecord;
  maxBodyBytes: number;
  /** Calls the unary method at `/<package.Service>/<Method>` as REST does, behind the interceptors. */
  invoke(methodPath: string, message: MessageShape<DescMessage>): Promise<UnaryOutcome>;
}

/** The REST routes an app answers and the auth rule of each method, by "<package.Service>/<Method>". */
export interface ServedApi {
  routes: ReturnType<typeof listRestRoutes>;
  authRules: ReadonlyMap<string, AuthRule>;
}

export interface AppOptions {
  modules: readonly ServiceModule[];
  authenticator: Authenticator;
  /** Checks X-API-Key for methods whose rule asks for key scopes. */
  apiKeys?: ApiKeyVerifier;
  /** Records calls refused by authentication or authorisation (fail closed when it throws). */
  onRefused?: (call: RefusedCall) => Promise<void>;
  health: HealthChecker;
  log: Logger;
  maxBodyBytes: number;
  /** Told of every call once it ended, with its access line (metrics). */
  onCallEnded?: CallEndOptions["onCallEnded"];
  /** TRUSTED_PROXIES (src/server/origin.ts); default none: the TCP peer is the client. */
  trustedProxies?: readonly string[];
  /** The origins CORS allows (src/server/cors.ts, followCorsOrigins); default none: CORS off. */
  corsOrigins?: () => ReadonlySet<string>;
}

/** The modules' own refusal hooks, by service type name. */
function refusalHooks(
  modules: readonly ServiceModule[],
): Map<string, (call: RefusedCall) => Promise<void>> {
  const byService = new Map<string, (call: RefusedCall) => Promise<void>>();
  for (const m of modules) {
    if (m.onRefused) for (const s of m.services) byService.set(s.typeName, m.onRefused);
  }
  return byService;
}

/** Sends each refusal to the hook of the module that owns the method, or to the default. */
function refusalRecorder(
  byService: ReadonlyMap<string, (call: RefusedCall) => Promise<void>>,
  fallback: ((call: RefusedCall) => Promise<void>) | undefined,
): (call: RefusedCall) => Promise<void> {
  return async (call) => {
    const own = byService.get(call.rpc.slice(0, call.rpc.indexOf("/")));
    await (own ?? fallback)?.(call);
  };
}

/**
 * Builds the request listener that serves every protocol on one port:
 * gRPC, gRPC-Web and Connect on `/<package.Service>/<Method>` paths, REST on
 * the paths of the `google.api.http` annotations (same handlers, same
 * interceptors), plus `/healthz`, `/readyz` and `/openapi.json`.
 */
export function createApp(options: AppOptions): {
  listener: RequestListener;
  handlers: readonly UniversalHandler[];
  /** What this app serves and how: the REST route table and each method's rule (tests, docs). */
  api: ServedApi;
} {
  const { modules, log } = options;
  const authRules = new Map<string, AuthRule>();
  // Reflection and health answer anyone: tools (buf curl, grpcurl) and probes call them.
  for (const service of [...reflectionServices, Health]) {
    for (const method of service.methods)
      authRules.set(`${service.typeName}/${method.name}`, publicMethod);
  }
  for (const m of modules) for (const [k, v] of m.authRules) authRules.set(k, v);
  const services = modules.flatMap((m) => m.services);
  const hooks = refusalHooks(modules);

  const interceptors = [
    createRequestInterceptor(log),
    createAuthInterceptor({
      authenticator: options.authenticator,
      rules: authRules,
      ...(options.apiKeys ? { apiKeys: options.apiKeys } : {}),
      onRefused: refusalRecorder(hooks, options.onRefused),
    }),
    createValidateInterceptor({ validator: createSchemaValidator() }),
    markHandled,
  ];
  // Unary methods are also called in process (gRPC's fast path, REST) behind the same
  // interceptors: the recording router registers on Connect's and keeps them.
  const unary = new UnaryMethods(interceptors);
  const router = unary.recording(
    createConnectRouter({
      interceptors,
      readMaxBytes: options.maxBodyBytes,
      acceptCompression: [compressionGzip, compressionBrotli],
      jsonOptions: { ignoreUnknownFields: false },
    }),
  );
  for (const m of modules) m.register(router);
  // Clients decode error details (ErrorInfo, Violations) through reflection too.
  registerReflection(router, services, [file_google_rpc_error_details, file_buf_validate_validate]);
  registerHealth(
    router,
    services.map((s) => s.typeName),
    options.health,
  );

  const handlers = router.handlers;
  const byPath = new Map<string, UniversalHandler>(handlers.map((h) => [h.requestPath, h]));
  const rest = createRestTranscoder({
    methods: unary,
    registry: createRegistry(
      file_google_rpc_error_details,
      // Error bodies of operator plugins travel as Struct details.
      file_google_protobuf_struct,
      file_buf_validate_validate,
      ...services.map((s) => s.file),
    ),
    maxBodyBytes: options.maxBodyBytes,
    log,
  });

  const openApi = createOpenApiEndpoint();
  const restRoutes = listRestRoutes(unary);
  const noOrigins: ReadonlySet<string> = new Set();
  const cors = createCors({
    allowedOrigins: options.corsOrigins ?? (() => noOrigins),
    rpcHandlers: handlers,
    restRoutes,
  });
  const httpRoutes = modules.flatMap((m) => m.httpRoutes ?? []);

  /** Serves one request; resolves once it is answered (or its client is gone). */
  const serve = (req: NodeRequest, res: NodeResponse, call: CallRecord): Promise<void> => {
    const path = (req.url ?? "/").split("?", 1)[0] ?? "/";
    const preflight = cors(req, res, path);
    if (preflight !== undefined) {
      call.protocol = "http";
      call.route = "OPTIONS (CORS preflight)";
      if (preflight === "preflight_allowed") noteOutcome(call, 0);
      else noteOutcome(call, Code.PermissionDenied, "CORS_ORIGIN_NOT_ALLOWED");
      return Promise.resolve();
    }
    const contextValues = createContextValues()
      .set(clientAddressKey, call.clientAddress)
      .set(userAgentKey, call.userAgent)
      .set(requestIdKey, call.requestId)
      .set(callRecordKey, call);
    const contentType = req.headers["content-type"] ?? "";
    const handler = byPath.get(path);
    if (handler !== undefined) {
      call.protocol = protocolOf(contentType);
      call.rpc = path.slice(1);
      const spec = isPlainGrpc(req) ? unary.get(path) : undefined;
      if (spec !== undefined) {
        return serveGrpcUnary(spec, req as Http2ServerRequest, res as Http2ServerResponse, {
          methods: unary,
          maxBodyBytes: options.maxBodyBytes,
          contextValues,
          log,
        }).catch((err: unknown) => log.error({ err, rpc: path }, "gRPC call failed"));
      }
      // Connect's adapter throws (synchronously, out of this listener) when a request names
      // no authority: an HTTP/1.0 request without Host. A bad request, not a crash.
      if (req.headers.host === undefined && req.headers[":authority"] === undefined) {
        noteOutcome(call, Code.InvalidArgument, "MISSING_HOST");
        const answer = restErrorResponse(
          new RestError(
            400,
            Code.InvalidArgument,
            "MISSING_HOST",
            "the request has no Host header",
          ),
        );
        res.writeHead(400, { "content-type": "application/json", connection: "close" });
        res.end(answer.body);
        req.resume();
        return Promise.resolve();
      }
      const connect = (parsedJsonBody: JsonValue | undefined): Promise<void> => {
        const uReq = universalRequestFromNodeRequest(req, res, parsedJsonBody, contextValues);
        // Ended when the response closes (universalResponseToNodeResponse never settles: it
        // waits for an "end" event that Node's responses do not emit).
        const closed = new Promise<void>((resolve) => res.once("close", resolve));
        let answer: { status: number; header?: Headers; trailer?: Headers } | undefined;
        handler(uReq)
          .then((uRes) => {
            answer = uRes;
            return universalResponseToNodeResponse(uRes, res);
          })
          .catch((err: unknown) => {
            if (ConnectError.from(err).code !== Code.Aborted)
              log.error({ err, rpc: path }, "handler failed");
          });
        return closed.then(() => {
          if (answer !== undefined) noteAnswered(call, answer);
        });
      };
      const jsonSpec = unary.get(path);
      if (jsonSpec === undefined || !isConnectJsonUnary(req, jsonSpec)) return connect(undefined);
      // A Connect JSON call: its body checked first, so that a wrong shape names its field.
      return readConnectJson(req, jsonSpec, options.maxBodyBytes).then(
        (read) => {
          if (read.kind === "json") return connect(read.json);
          if (read.kind === "gone") return noteOutcome(call, Code.Canceled);
          noteOutcome(call, read.error.code, read.reason);
          sendConnectError(req, res, read.error, call.requestId);
        },
        (err: unknown) => {
          // A fault of the check itself: answered (generic), never left hanging.
          log.error({ err, rpc: path }, "Connect JSON body check failed");
          noteOutcome(call, Code.Internal, "INTERNAL");
          sendConnectError(
            req,
            res,
            new ConnectError("internal error", Code.Internal),
            call.requestId,
          );
        },
      );
    }
    if (contentType.startsWith("application/grpc")) {
      call.protocol = protocolOf(contentType);
      noteOutcome(call, Code.Unimplemented);
      unimplemented(path, contentType, res);
      return Promise.resolve();
    }
    if (path === openApiPath) {
      call.protocol = "http";
      call.route = `${req.method} ${path}`;
      const status = openApi(req, res);
      noteOutcome(call, status === 405 ? Code.Unimplemented : 0);
      return Promise.resolve();
    }
    if (path === "/healthz" || path === "/readyz") {
      call.protocol = "http";
      call.route = `${req.method} ${path}`;
      return probe(path, options.health, res).then((ready) =>
        noteOutcome(call, ready ? 0 : Code.Unavailable),
      );
    }
    const own = httpRoutes.find((r) => r.path === path && r.takes(req));
    if (own !== undefined) {
      return own.serve(req, res, {
        record: call,
        maxBodyBytes: options.maxBodyBytes,
        invoke: (methodPath, message) => {
          const spec = unary.get(methodPath);
          if (spec === undefined) throw new Error(`no unary method ${methodPath}`);
          return invokeFromHttp(spec, req, res, message, unary, contextValues);
        },
      });
    }
    return rest(req, res, contextValues);
  };

  const end = createCallEnd({
    log,
    refusalHooks: hooks,
    authRules,
    authenticator: options.authenticator,
    ...(options.onCallEnded ? { onCallEnded: options.onCallEnded } : {}),
  });
  const originOf = createOriginResolver(parseTrustedProxies(options.trustedProxies ?? []).proxies);
  const listener: RequestListener = (req, res) => {
    joinRepeatedAuthorization(req);
    const call = startCall(req, res, "rest", originOf(req));
    void serve(req, res, call)
      .catch((err: unknown) => log.error({ err, rpc: call.rpc }, "request failed"))
      .then(() => end(call, req, res));
  };
  return { listener, handlers, api: { routes: restRoutes, authRules } };
}

/** A gRPC or gRPC-Web call to a method this server does not have: trailers-only UNIMPLEMENTED. */
function unimplemented(path: string, contentType: string, res: NodeResponse): void {
  res.writeHead(200, {
    "content-type": contentType.startsWith("application/grpc-web")
      ? "application/grpc-web+proto"
      : "application/grpc",
    "grpc-status": String(Code.Unimplemented),
    "grpc-message": encodeURIComponent(`unknown method ${path}`),
  });
  res.end();
}

/** `/healthz`: the process answers. `/readyz`: and the database answers too. */
async function probe(path: string, health: HealthChecker, res: NodeResponse): Promise<boolean> {
  const ready =
    path === "/healthz" || (await health.check().catch(() => "NOT_SERVING")) === "SERVING";
  const body = JSON.stringify({ status: ready ? "ok" : "unavailable" });
  res.writeHead(ready ? 200 : 503, {
    "content-type": "application/json",
    "cache-control": "no-store",
  });
  res.end(body);
  return ready;
}

import type { DescMessage, MessageShape } from "@bufbuild/protobuf";
import {
  Code,
  ConnectError,
  type ConnectRouter,
  type ContextValues,
  createServiceImplSpec,
  type HandlerContext,
  type Interceptor,
  type MethodImplSpec,
} from "@connectrpc/connect";
// Connect marks invokeUnaryImplementation (and protocol-grpc's parseTimeout and
// setTrailerStatus, used by grpc-unary.ts) as internal: exported, but outside semantic
// versioning. The lock file pins Connect; on an upgrade, test/unit/grpc-unary.test.ts and the
// protocol matrix (test/integration/protocols.test.ts) are what tell whether they still hold.
import { invokeUnaryImplementation } from "@connectrpc/connect/protocol";

/** A unary method as registered on the router: its descriptor and implementation. */
export type UnarySpec = MethodImplSpec<DescMessage, DescMessage> & { kind: "unary" };

/** What a protocol adapter knows about a call before it hands over the request message. */
export interface UnaryCallInit {
  /** "grpc" or "rest": what the call arrived as (HandlerContext.protocolName). */
  protocolName: string;
  /** The request's metadata as the handlers see it (protocol headers left out). */
  requestHeader: Headers;
  url: string;
  /**
   * Aborted when the client goes away, and once the call has finished (`clientGoneSignal`:
   * the adapter calls its `end()`); the handler's signal unless the call has a deadline.
   */
  signal: AbortSignal;
  /** The caller's deadline, if it sent one. */
  timeoutMs?: number | undefined;
  contextValues: ContextValues;
}

export interface UnaryOutcome {
  message: MessageShape<DescMessage>;
  /** Response headers and trailers set by the implementation and the interceptors. */
  header: Headers;
  trailer: Headers;
}

/** The reason given to a finished call's signal: preallocated, so finishing costs no stack trace. */
const finished = new ConnectError("the call has finished", Code.Canceled);

/**
 * A signal for a call's handler that aborts (Canceled) when the response closes before the
 * call has ended: the client reset its stream or dropped the connection. Call `end()` once
 * the answer is decided: the signal then aborts with "the call has finished", which tells
 * anything still listening (a plugin call, a query) that the call is over, as Connect's
 * handler context does. (On HTTP/2, `writableFinished` is already true after a RST_STREAM,
 * so it cannot tell the two apart; this flag can.)
 */
export function clientGoneSignal(res: { once(event: "close", listener: () => void): unknown }): {
  signal: AbortSignal;
  end(): void;
} {
  const abort = new AbortController();
  let ended = false;
  res.once("close", () => {
    if (!ended) abort.abort(new ConnectError("the client closed the request", Code.Canceled));
  });
  return {
    signal: abort.signal,
    end: () => {
      if (ended) return;
      ended = true;
      if (!abort.signal.aborted) abort.abort(finished);
    },
  };
}

/**
 * The handler's signal when the call has a deadline: aborts (DeadlineExceeded) when it
 * passes, or as the request's signal does. `finish()` stops the timer.
 */
/** The longest delay a Node.js timer holds (2^31 − 1 ms). */
const maxTimerMs = 2 ** 31 - 1;

function deadlineSignal(
  request: AbortSignal,
  timeoutMs: number,
): { signal: AbortSignal; finish(): void } {
  const controller = new AbortController();
  const onRequestAbort = () => controller.abort(request.reason);
  const timer = setTimeout(
    () => controller.abort(new ConnectError("the operation timed out", Code.DeadlineExceeded)),
    // Node fires a longer timer at once (with a warning): a deadline beyond ~24.8 days is
    // held as that long.
    Math.min(timeoutMs, maxTimerMs),
  );
  if (request.aborted) onRequestAbort();
  else request.addEventListener("abort", onRequestAbort, { once: true });
  return {
    signal: controller.signal,
    finish() {
      clearTimeout(timer);
      request.removeEventListener("abort", onRequestAbort);
      if (!controller.signal.aborted) controller.abort(finished);
    },
  };
}

/**
 * The unary methods of every service registered on a router, callable in process
 * with a request message: the same implementations behind the same interceptors
 * (in the same order) as the router's handlers, without a wire protocol in between.
 *
 * Connect's handlers run every call, unary ones included, through a pipeline of
 * async iterables built for streaming; the protocol adapters that use this
 * (`src/server/grpc-unary.ts` for gRPC, the REST transcoder) only parse the
 * request and write the answer, and everything a handler can observe (context
 * values, headers, deadline, signal, errors) is what Connect gives it.
 */
export class UnaryMethods {
  readonly #byPath = new Map<string, UnarySpec>();

  constructor(private readonly interceptors: readonly Interceptor[]) {}

  /**
   * A router that registers on `router` and also records each service's unary
   * methods here. Give it to the modules' `register` in place of the router.
   */
  recording(router: ConnectRouter): ConnectRouter {
    const byPath = this.#byPath;
    const recording: ConnectRouter = {
      get handlers() {
        return router.handlers;
      },
      service(service, implementation, options) {
        if (options !== undefined) {
          // Per-service options (interceptors, limits) are not applied by the in-process
          // path; nothing registers any, and this refuses rather than ignores them.
          throw new Error(
            `service ${service.typeName}: per-service router options are not supported`,
          );
        }
        router.service(service, implementation);
        const spec = createServiceImplSpec(service, implementation);
        for (const method of Object.values(spec.methods)) {
          if (method.kind === "unary") {
            byPath.set(`/${service.typeName}/${method.method.name}`, method as UnarySpec);
          }
        }
        return recording;
      },
      rpc(method) {
        throw new Error(
          `rpc ${method.parent.typeName}/${method.name}: register whole services (router.service)`,
        );
      },
    };
    return recording;
  }

  /** The unary method served at `/<package.Service>/<Method>`, if there is one. */
  get(path: string): UnarySpec | undefined {
    return this.#byPath.get(path);
  }

  /** Every recorded unary method, in registration order. */
  specs(): UnarySpec[] {
    return [...this.#byPath.values()];
  }

  /**
   * Runs the method's interceptors and implementation. Resolves with the response
   * message and the headers and trailers to send; rejects with what the interceptors
   * let through (the request interceptor maps every error to a ConnectError).
   */
  async invoke(
    spec: UnarySpec,
    input: MessageShape<DescMessage>,
    init: UnaryCallInit,
  ): Promise<UnaryOutcome> {
    // The handler's context as Connect's createHandlerContext makes it, minus what a unary
    // call in process does not need: the adapter's signal itself (it aborts when the client
    // goes, and once the call has finished) unless a deadline needs a signal of its own, and
    // the request's headers as the adapter built them (not copied once more).
    const deadline =
      init.timeoutMs === undefined ? undefined : deadlineSignal(init.signal, init.timeoutMs);
    const deadlineAt = init.timeoutMs === undefined ? undefined : Date.now() + init.timeoutMs;
    const context: HandlerContext = {
      method: spec.method,
      service: spec.method.parent,
      requestMethod: "POST",
      protocolName: init.protocolName,
      url: init.url,
      signal: deadline?.signal ?? init.signal,
      timeoutMs: () => (deadlineAt === undefined ? undefined : deadlineAt - Date.now()),
      requestHeader: init.requestHeader,
      responseHeader: new Headers(),
      responseTrailer: new Headers(),
      values: init.contextValues,
    };
    try {
      const message = await invokeUnaryImplementation(
        spec,
        context,
        input,
        this.interceptors as Interceptor[],
      );
      return { message, header: context.responseHeader, trailer: context.responseTrailer };
    } catch (err) {
      // Headers and trailers the handler set before it threw go out with the error, as
      // Connect's handlers send them (metadata the error names itself wins).
      if (err instanceof ConnectError) {
        for (const source of [context.responseHeader, context.responseTrailer]) {
          for (const [name, value] of source) {
            if (!err.metadata.has(name)) err.metadata.set(name, value);
          }
        }
      }
      throw err;
    } finally {
      // Stops the deadline timer; the adapter's `end()` tells the rest that the call is over.
      deadline?.finish();
    }
  }
}

import { create, type DescMessage, type MessageShape } from "@bufbuild/protobuf";
import {
  Code,
  ConnectError,
  type ConnectRouter,
  type ContextValues,
  createServiceImplSpec,
  type HandlerContext,
  type Interceptor,
  type MethodImplSpec,
  type UnaryRequest,
  type UnaryResponse,
} from "@connectrpc/connect";

/** A unary method as registered on the router: its descriptor and implementation. */
export type UnarySpec = MethodImplSpec<DescMessage, DescMessage> & { kind: "unary" };

/** What a protocol adapter knows about a call before it hands over the request message. */
export interface UnaryCallInit {
  /** "grpc" or "rest": what the call arrived as (HandlerContext.protocolName). */
  protocolName: string;
  /** The request's metadata as the handlers see it (protocol headers left out). */
  requestHeader: Headers;
  url: string;
  /** The call's signal and deadline (the adapter calls its `end()` once the answer is decided). */
  call: CallSignal;
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

/** The longest delay a Node.js timer holds (2^31 − 1 ms). */
const maxTimerMs = 2 ** 31 - 1;

/**
 * A call's abort signal, as Connect's handler context gives it: aborts Canceled when the
 * response closes before the call has ended (the client reset its stream or dropped the
 * connection), DeadlineExceeded when the caller's deadline passes, and "the call has finished"
 * once the adapter calls `end()` (which tells anything still listening, a plugin call or a
 * query, that the call is over). On HTTP/2, `writableFinished` is already true after a
 * RST_STREAM, so it cannot tell a reset from the end; the `ended` flag can.
 *
 * The signal is made when something first asks for it, already aborted if its moment has
 * passed: most calls (a policy decision, a token check) never do, and an AbortSignal costs
 * microseconds to make and to abort, a deadline a timer besides (5–6 µs and 3–6 µs in a
 * micro-benchmark on this machine's Node 20, of the 240–390 µs a decision takes on the server).
 */
export class CallSignal {
  #controller: AbortController | undefined;
  #timer: NodeJS.Timeout | undefined;
  #deadlineAt: number | undefined;
  /** When the client went (Date.now()), if it did before the call ended. */
  #goneAt: number | undefined;
  #ended = false;

  /**
   * `res` is the call's response, not yet answered: closed already (HTTP/1.1's `closed`,
   * HTTP/2's stream `closed`) means the client left before the call began, e.g. while its body
   * was read.
   */
  constructor(res: {
    once(event: "close", listener: () => void): unknown;
    closed?: boolean;
    stream?: { closed?: boolean } | undefined;
  }) {
    if (res.closed === true || res.stream?.closed === true) {
      this.#goneAt = Date.now();
      return;
    }
    res.once("close", () => {
      if (this.#ended) return;
      this.#goneAt = Date.now();
      this.#abort(this.#goneReason());
    });
  }

  /**
   * Why the call stopped when the client went: Canceled, or DeadlineExceeded if its deadline
   * had passed before (as a signal made early would have said: its timer fired first).
   */
  #goneReason(): ConnectError {
    return this.#deadlineAt !== undefined &&
      this.#goneAt !== undefined &&
      this.#deadlineAt <= this.#goneAt
      ? timedOut()
      : new ConnectError("the client closed the request", Code.Canceled);
  }

  /** The caller's deadline, `timeoutMs` from now. */
  setDeadline(timeoutMs: number): void {
    this.#deadlineAt = Date.now() + timeoutMs;
  }

  /** Milliseconds left until the deadline (HandlerContext.timeoutMs), if there is one. */
  remainingMs(): number | undefined {
    return this.#deadlineAt === undefined ? undefined : this.#deadlineAt - Date.now();
  }

  get signal(): AbortSignal {
    if (this.#controller !== undefined) return this.#controller.signal;
    const controller = new AbortController();
    this.#controller = controller;
    if (this.#ended) controller.abort(finished);
    else if (this.#goneAt !== undefined) controller.abort(this.#goneReason());
    else if (this.#deadlineAt !== undefined) {
      const left = this.#deadlineAt - Date.now();
      if (left <= 0) controller.abort(timedOut());
      // Node fires a longer timer at once (with a warning): a deadline beyond ~24.8 days is
      // held as that long.
      else this.#timer = setTimeout(() => controller.abort(timedOut()), Math.min(left, maxTimerMs));
    }
    return controller.signal;
  }

  /** The answer is decided: the signal (if one was made) aborts with "the call has finished". */
  end(): void {
    if (this.#ended) return;
    this.#ended = true;
    this.#abort(finished);
  }

  #abort(reason: ConnectError): void {
    clearTimeout(this.#timer);
    const controller = this.#controller;
    if (controller !== undefined && !controller.signal.aborted) controller.abort(reason);
  }
}

const timedOut = () => new ConnectError("the operation timed out", Code.DeadlineExceeded);

/** What a call's request carries for the innermost function of the chain (not for interceptors). */
const callState = Symbol("traitgate.unary-call");

interface CallState {
  protocolName: string;
  call: CallSignal;
  responseHeader: Headers;
  responseTrailer: Headers;
}

type InProcessRequest = UnaryRequest & { [callState]?: CallState };
type UnaryChain = (req: UnaryRequest) => Promise<UnaryResponse>;

/**
 * A method's interceptor chain, composed once when the method is registered (Connect composes
 * it on every call): the interceptors in order, then the implementation with the handler
 * context made from the request. So an interceptor's outer function, `(next) => ...`, runs
 * once per method here, not once per call: per-call state belongs in the inner one.
 */
function composeChain(spec: UnarySpec, interceptors: readonly Interceptor[]): UnaryChain {
  const implementation: UnaryChain = async (req: InProcessRequest) => {
    const state = req[callState];
    if (state === undefined) {
      // A request an interceptor built anew, without the call's state (spreading the request
      // keeps it): the handler's deadline, protocol and the headers it sets would be lost.
      throw new ConnectError(
        `${spec.method.parent.typeName}/${spec.method.name}: an interceptor passed on a request without its call state`,
        Code.Internal,
      );
    }
    // As Connect's handler context, with the request's header, signal and values as the
    // interceptors passed them on (an interceptor may hand on a request of its own).
    const context: HandlerContext = {
      method: spec.method,
      service: spec.method.parent,
      requestMethod: req.requestMethod,
      protocolName: state.protocolName,
      url: req.url,
      get signal() {
        return req.signal;
      },
      timeoutMs: () => state.call.remainingMs(),
      requestHeader: req.header,
      responseHeader: state.responseHeader,
      responseTrailer: state.responseTrailer,
      values: req.contextValues,
    };
    const message = create(spec.method.output, await spec.impl(req.message, context));
    return {
      stream: false,
      method: spec.method,
      service: spec.method.parent,
      message,
      header: context.responseHeader,
      trailer: context.responseTrailer,
    };
  };
  let chain = implementation;
  for (let i = interceptors.length - 1; i >= 0; i--) {
    chain = (interceptors[i] as Interceptor)(chain as never) as unknown as UnaryChain;
  }
  return chain;
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
  readonly #chains = new Map<UnarySpec, UnaryChain>();

  constructor(private readonly interceptors: readonly Interceptor[]) {}

  /**
   * A router that registers on `router` and also records each service's unary
   * methods here. Give it to the modules' `register` in place of the router.
   */
  recording(router: ConnectRouter): ConnectRouter {
    const byPath = this.#byPath;
    const chains = this.#chains;
    const interceptors = this.interceptors;
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
            chains.set(method as UnarySpec, composeChain(method as UnarySpec, interceptors));
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
    let chain = this.#chains.get(spec);
    if (chain === undefined) {
      chain = composeChain(spec, this.interceptors);
      this.#chains.set(spec, chain);
    }
    const state: CallState = {
      protocolName: init.protocolName,
      call: init.call,
      responseHeader: new Headers(),
      responseTrailer: new Headers(),
    };
    const { call } = init;
    // The request as Connect's handlers make it, but for the signal: made only if asked for.
    const request: InProcessRequest = {
      stream: false,
      message: input,
      method: spec.method,
      service: spec.method.parent,
      requestMethod: "POST",
      url: init.url,
      get signal() {
        return call.signal;
      },
      header: init.requestHeader,
      contextValues: init.contextValues,
      [callState]: state,
    };
    try {
      const { message, header, trailer } = await chain(request);
      return { message, header, trailer };
    } catch (err) {
      // Headers and trailers the handler set before it threw go out with the error, as
      // Connect's handlers send them (metadata the error names itself wins).
      if (err instanceof ConnectError) {
        for (const source of [state.responseHeader, state.responseTrailer]) {
          for (const [name, value] of source) {
            if (!err.metadata.has(name)) err.metadata.set(name, value);
          }
        }
      }
      throw err;
    }
  }
}

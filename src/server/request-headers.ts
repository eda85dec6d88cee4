/**
 * A call's request headers as the handlers see them (`HandlerContext.requestHeader`), read
 * from the Node request's header list only as far as they are asked for.
 *
 * Building a fetch `Headers` checks and copies every name and value (undici's ByteString
 * conversion reads each character of a 300-character bearer token): about 5 % of a unary gRPC
 * call's server CPU in a profile at 64 in flight, for a handler chain that reads two or three
 * headers with `get`. `get` and `has` here scan the list instead, with the same answer as the
 * full object; anything else (iterating, changing it) builds the full object first, once, and
 * is then `Headers` itself. What reads undici's internal list without calling a method
 * (`Headers.prototype.get.call(h, …)`, `util.inspect`) sees no header until then; `new
 * Headers(h)` and `fetch` iterate it, and see them all.
 */
export class RequestHeaders extends (Headers as unknown as new () => HeadersMethods) {
  /** `[name, value, name, value, …]`, names lowercase; undefined once the full object is built. */
  #pairs: readonly string[] | undefined;

  /**
   * `pairs`: the request's headers as Node gives them, `[name, value, …]` (HTTP/2's raw list,
   * or `req.headers` flattened), those the handlers must not see left out.
   */
  constructor(pairs: readonly string[]) {
    super();
    // Node gives lowercase names (HTTP/2 requires them, req.headers lowercases); a list from
    // elsewhere is made so, or a lookup would miss a header that is there.
    let lower = pairs;
    for (let i = 0; i < pairs.length; i += 2) {
      const name = pairs[i] as string;
      if (name !== name.toLowerCase()) {
        lower = pairs.map((v, k) => (k % 2 === 0 ? v.toLowerCase() : v));
        break;
      }
    }
    this.#pairs = lower;
  }

  override get(name: string): string | null {
    const pairs = this.#pairs;
    if (pairs === undefined) return super.get(name);
    const wanted = headerName(name);
    // Fetch joins a repeated header's values with ", ", Cookie's with "; " (as HTTP/2 clients
    // may split one Cookie header into several).
    const separator = wanted === "cookie" ? "; " : ", ";
    let found: string | null = null;
    for (let i = 0; i + 1 < pairs.length; i += 2) {
      if (pairs[i] !== wanted) continue;
      const value = headerValue(pairs[i + 1] as string);
      if (value === undefined) continue;
      found = found === null ? value : `${found}${separator}${value}`;
    }
    return found;
  }

  override has(name: string): boolean {
    return this.get(name) !== null;
  }

  override append(name: string, value: string): void {
    this.#full();
    super.append(name, value);
  }

  override set(name: string, value: string): void {
    this.#full();
    super.set(name, value);
  }

  override delete(name: string): void {
    this.#full();
    super.delete(name);
  }

  override getSetCookie(): string[] {
    this.#full();
    return super.getSetCookie();
  }

  override forEach(
    callback: (value: string, key: string, parent: Headers) => void,
    thisArg?: unknown,
  ): void {
    this.#full();
    super.forEach(callback, thisArg);
  }

  override entries(): IterableIterator<[string, string]> {
    this.#full();
    return super.entries();
  }

  override keys(): IterableIterator<string> {
    this.#full();
    return super.keys();
  }

  override values(): IterableIterator<string> {
    this.#full();
    return super.values();
  }

  override [Symbol.iterator](): IterableIterator<[string, string]> {
    this.#full();
    return super.entries();
  }

  /** Puts every header in, as a `Headers` built from the list would hold them (once). */
  #full(): void {
    const pairs = this.#pairs;
    if (pairs === undefined) return;
    this.#pairs = undefined;
    for (let i = 0; i + 1 < pairs.length; i += 2) {
      try {
        super.append(pairs[i] as string, pairs[i + 1] as string);
      } catch {
        // A value fetch's Headers refuses: the handler does not see it (as before).
      }
    }
  }
}

/** A header name as `Headers` takes it (a token), lowercase; anything else throws as it does. */
function headerName(name: string): string {
  if (!token.test(name)) throw new TypeError(`Headers.get: "${name}" is an invalid header name.`);
  return name.toLowerCase();
}

const token = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;

/**
 * A value as `Headers.append` keeps it: leading and trailing whitespace removed; undefined
 * where it refuses the value (NUL, CR or LF inside, or a character beyond Latin-1). Trimmed
 * by a scan from each end, not a regular expression: `/\s+$/` retries from every position of
 * a run of spaces inside a value, quadratic in a header a client sends before it is
 * authenticated.
 */
function headerValue(value: string): string | undefined {
  let start = 0;
  let end = value.length;
  while (start < end && isHttpWhitespace(value.charCodeAt(start))) start++;
  while (end > start && isHttpWhitespace(value.charCodeAt(end - 1))) end--;
  const trimmed = start === 0 && end === value.length ? value : value.slice(start, end);
  return refused.test(trimmed) ? undefined : trimmed;
}

/** Tab, LF, CR and space: what fetch's Headers trims from a value's ends. */
const isHttpWhitespace = (c: number): boolean =>
  c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d;
const refused = /[\0\r\n]|[^\0-\xff]/;

/**
 * `Headers` as its methods: Node's type declarations give them as instance properties, which a
 * subclass cannot override with methods or reach through `super` (they are methods of its
 * prototype at run time).
 */
interface HeadersMethods {
  get(name: string): string | null;
  has(name: string): boolean;
  append(name: string, value: string): void;
  set(name: string, value: string): void;
  delete(name: string): void;
  getSetCookie(): string[];
  forEach(callback: (value: string, key: string, parent: Headers) => void, thisArg?: unknown): void;
  entries(): IterableIterator<[string, string]>;
  keys(): IterableIterator<string>;
  values(): IterableIterator<string>;
  [Symbol.iterator](): IterableIterator<[string, string]>;
}

/**
 * Makes a repeated `Authorization` count on every path. Node keeps only the first of a
 * repeated single-value header in `req.headers` (HTTP/1.1 and HTTP/2 alike), which Connect's
 * adapter, the REST transcoder and the call log read: a request carrying two credentials was
 * judged by the first, while a proxy in front may have checked the other. The gRPC path reads
 * the raw list and joins them, as fetch does; this gives `req.headers` the same joined value,
 * which no credential parser accepts, so every protocol answers unauthenticated (fail closed).
 * Called once per request, before anything reads its headers.
 */
export function joinRepeatedAuthorization(req: {
  readonly rawHeaders: readonly string[];
  readonly headers: Record<string, string | string[] | undefined>;
}): void {
  const raw = req.rawHeaders;
  // HTTP/2 names are lowercase; HTTP/1.1 names keep the client's spelling.
  const isAuthorization = (name: string) =>
    name.length === 13 && name.toLowerCase() === "authorization";
  let count = 0;
  for (let i = 0; i + 1 < raw.length; i += 2) if (isAuthorization(raw[i] as string)) count++;
  if (count < 2) return;
  const values: string[] = [];
  for (let i = 0; i + 1 < raw.length; i += 2) {
    if (isAuthorization(raw[i] as string)) values.push(raw[i + 1] as string);
  }
  req.headers.authorization = values.join(", ");
}

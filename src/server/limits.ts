/**
 * How long a connection may sit idle or half-sent, and how many a process and one
 * client address may hold open: the listener's defaults (src/server/listener.ts),
 * which the configuration (src/config.ts) overrides from the environment.
 */

export interface Http1Limits {
  /** Time to receive a request's head (HTTP1_HEADERS_TIMEOUT_MS). */
  headersTimeoutMs: number;
  /** Time to receive a whole request. */
  requestTimeoutMs: number;
  /**
   * How often the two above are checked: a slow head is closed between
   * `headersTimeoutMs` and `headersTimeoutMs + checkIntervalMs` after it began.
   */
  checkIntervalMs: number;
  /** An idle keep-alive connection is closed after this long. */
  keepAliveTimeoutMs: number;
}

export interface ConnectionLimits {
  /** Open connections per process (MAX_CONNECTIONS); beyond it new ones are closed at once. */
  max: number;
  /** Open connections per client address (MAX_CONNECTIONS_PER_ADDRESS); 0 = no cap. */
  maxPerAddress: number;
}

export interface ListenerLimits {
  http1: Http1Limits;
  /** An HTTP/2 session with no open stream for this long is closed (HTTP2_IDLE_TIMEOUT_MS). */
  h2IdleTimeoutMs: number;
  connections: ConnectionLimits;
}

export const listenerDefaults: ListenerLimits = {
  // Node's own defaults (60 s checked every 30 s) held a slow head for up to 90 s.
  http1: {
    headersTimeoutMs: 20_000,
    requestTimeoutMs: 300_000,
    checkIntervalMs: 5_000,
    keepAliveTimeoutMs: 5_000,
  },
  h2IdleTimeoutMs: 120_000,
  connections: { max: 2048, maxPerAddress: 128 },
};

import type { IncomingMessage } from "node:http";
import type { Http2ServerRequest } from "node:http2";
import { Code } from "@connectrpc/connect";
import { RestError } from "./errors.js";

type NodeRequest = IncomingMessage | Http2ServerRequest;

/** The client went away while sending the body: nobody is left to answer. */
export class ClientGoneError extends Error {
  constructor() {
    super("the client closed the request");
    this.name = "ClientGoneError";
  }
}

/** 413 BODY_TOO_LARGE (resource_exhausted). */
export function bodyTooLarge(maxBytes: number): RestError {
  return new RestError(
    413,
    Code.ResourceExhausted,
    "BODY_TOO_LARGE",
    `the request body is larger than ${maxBytes} bytes`,
  );
}

function unsupportedMediaType(): RestError {
  return new RestError(
    415,
    Code.InvalidArgument,
    "UNSUPPORTED_MEDIA_TYPE",
    "the request body must be JSON, sent with content-type: application/json",
  );
}

/** `application/json`, with no charset or a UTF-8 one. */
export function isJsonContentType(value: string | undefined): boolean {
  if (value === undefined) return false;
  const [type = "", ...params] = value.split(";");
  if (type.trim().toLowerCase() !== "application/json") return false;
  return params.every((param) => {
    const [name = "", val = ""] = param.split("=");
    if (name.trim().toLowerCase() !== "charset") return true;
    const charset = val.trim().replaceAll('"', "").toLowerCase();
    return charset === "utf-8" || charset === "utf8";
  });
}

/**
 * Reads at most `maxBytes` of the body, stopping (and failing with 413) as
 * soon as more arrive; the rest is left for Node to discard.
 */
export function readLimited(req: NodeRequest, maxBytes: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const cleanup = () => {
      req.off("data", onData);
      req.off("end", onEnd);
      req.off("error", onError);
      req.off("close", onClose);
    };
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > maxBytes) {
        cleanup();
        reject(bodyTooLarge(maxBytes));
        return;
      }
      chunks.push(chunk);
    };
    const onEnd = () => {
      cleanup();
      resolve(Buffer.concat(chunks, size));
    };
    const onError = () => {
      cleanup();
      reject(new ClientGoneError());
    };
    const onClose = () => {
      cleanup();
      reject(new ClientGoneError());
    };
    req.on("data", onData);
    req.once("end", onEnd);
    req.once("error", onError);
    req.once("close", onClose);
  });
}

/**
 * The JSON body of a method that takes one: undefined when empty, 413 when
 * over the limit (Content-Length is checked before reading), 415 when a
 * non-empty body is not `application/json`.
 */
export async function readJsonBody(
  req: NodeRequest,
  maxBytes: number,
): Promise<Uint8Array | undefined> {
  const lengthHeader = req.headers["content-length"];
  const declared = lengthHeader === undefined ? undefined : Number(lengthHeader);
  if (declared !== undefined && declared > maxBytes) throw bodyTooLarge(maxBytes);
  const json = isJsonContentType(req.headers["content-type"]);
  if (declared !== undefined && declared > 0 && !json) throw unsupportedMediaType();
  if (declared === 0) return undefined;
  const body = await readLimited(req, maxBytes);
  if (body.length === 0) return undefined;
  if (!json) throw unsupportedMediaType();
  return body;
}

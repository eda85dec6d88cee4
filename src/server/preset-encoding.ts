/**
 * Bytes a message already has in the form a transport sends or a handler forwards, so that
 * nobody serializes it again: the operator lane's payloads and plugin replies are JSON text
 * on both sides of the gateway, and converting them to `google.protobuf.Struct` and back
 * would cost more than the rest of the hop (docs/operator-lane.md).
 *
 * Kept beside the message (keyed by the message object, never copied with it), so that
 * the message itself stays complete and every other path (Connect, gRPC-Web, in process)
 * serializes it as usual. What is preset must encode the same value as the message.
 */

/** How a response message is sent without serializing it again. */
export interface PresetResponse {
  /** The REST answer's body, when the route answers with this one field (`response_body`). */
  restField?: { name: string; json: Uint8Array };
  /** The message in the protobuf binary format (called once, when gRPC sends it). */
  binary?: () => Uint8Array;
}

const responses = new WeakMap<object, PresetResponse>();
const requestFields = new WeakMap<object, ReadonlyMap<string, Buffer>>();

/** Presets `message`'s encodings; returns the message. */
export function presetResponse<T extends object>(message: T, preset: PresetResponse): T {
  responses.set(message, preset);
  return message;
}

export const presetResponseOf = (message: object): PresetResponse | undefined =>
  responses.get(message);

/** Records the JSON text a request's top-level fields were parsed from (by field name). */
export function setRequestFieldsJson(message: object, fields: ReadonlyMap<string, Buffer>): void {
  requestFields.set(message, fields);
}

/**
 * The JSON text a request field was parsed from, as the client sent it (REST), when the
 * transport kept it; undefined otherwise (gRPC, Connect, in process).
 */
export const requestFieldJson = (message: object, field: string): Buffer | undefined =>
  requestFields.get(message)?.get(field);

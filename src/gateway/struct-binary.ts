import type { JsonObject, JsonValue } from "@bufbuild/protobuf";

/**
 * The protobuf binary encoding of a message whose one set field is a
 * `google.protobuf.Struct` (the gateway's CallResponse: `reply = 1`), written straight from
 * the parsed JSON: what protobuf-es's `toBinary` writes for it, without first building the
 * Struct's Value messages. Two passes: the sizes of every nested message, then the bytes.
 *
 *   Struct    { map<string, Value> fields = 1; }         entry: key = 1, value = 2
 *   Value     { null_value = 1 (varint) | number_value = 2 (double) | string_value = 3
 *               | bool_value = 4 (varint) | struct_value = 5 | list_value = 6 }
 *   ListValue { repeated Value values = 1; }
 */

const varintSize = (n: number): number =>
  n < 0x80 ? 1 : n < 0x4000 ? 2 : n < 0x200000 ? 3 : n < 0x10000000 ? 4 : 5;

/** A field's length-delimited size: tag, length, content. */
const delimited = (size: number): number => 1 + varintSize(size) + size;

class Sizes {
  /** Sizes of the nested messages and strings, in the order the writer meets them. */
  readonly list: number[] = [];

  /** The size of a Value's content. */
  value(v: JsonValue): number {
    if (v === null) return 2;
    switch (typeof v) {
      case "number":
        return 9;
      case "boolean":
        return 2;
      case "string": {
        const n = Buffer.byteLength(v);
        this.list.push(n);
        return delimited(n);
      }
      default: {
        const at = this.list.push(0) - 1;
        const n = Array.isArray(v) ? this.listValue(v) : this.struct(v);
        this.list[at] = n;
        return delimited(n);
      }
    }
  }

  listValue(values: readonly JsonValue[]): number {
    let size = 0;
    for (const v of values) {
      const at = this.list.push(0) - 1;
      const n = this.value(v);
      this.list[at] = n;
      size += delimited(n);
    }
    return size;
  }

  struct(object: JsonObject): number {
    let size = 0;
    for (const key in object) {
      const v = object[key];
      if (v === undefined) continue;
      const keySize = Buffer.byteLength(key);
      const at = this.list.push(0, keySize, 0) - 3;
      const valueSize = this.value(v);
      this.list[at + 2] = valueSize;
      const entry = delimited(keySize) + delimited(valueSize);
      this.list[at] = entry;
      size += delimited(entry);
    }
    return size;
  }
}

class Writer {
  at = 0;
  next = 0;
  constructor(
    readonly out: Buffer,
    readonly sizes: readonly number[],
  ) {}

  private size(): number {
    return this.sizes[this.next++] ?? 0;
  }

  private varint(n: number): void {
    while (n > 0x7f) {
      this.out[this.at++] = (n & 0x7f) | 0x80;
      n >>>= 7;
    }
    this.out[this.at++] = n;
  }

  /** A tag and a length (the caller writes the content). */
  private head(tag: number, length: number): void {
    this.out[this.at++] = tag;
    this.varint(length);
  }

  value(v: JsonValue): void {
    if (v === null) {
      this.out[this.at++] = 0x08;
      this.out[this.at++] = 0;
      return;
    }
    switch (typeof v) {
      case "number":
        this.out[this.at++] = 0x11;
        this.at = this.out.writeDoubleLE(v, this.at);
        return;
      case "boolean":
        this.out[this.at++] = 0x20;
        this.out[this.at++] = v ? 1 : 0;
        return;
      case "string":
        this.head(0x1a, this.size());
        this.at += this.out.write(v, this.at);
        return;
      default:
        if (Array.isArray(v)) {
          this.head(0x32, this.size());
          this.listValue(v);
        } else {
          this.head(0x2a, this.size());
          this.struct(v);
        }
    }
  }

  listValue(values: readonly JsonValue[]): void {
    for (const v of values) {
      this.head(0x0a, this.size());
      this.value(v);
    }
  }

  struct(object: JsonObject): void {
    for (const key in object) {
      const v = object[key];
      if (v === undefined) continue;
      this.head(0x0a, this.size());
      this.head(0x0a, this.size());
      this.at += this.out.write(key, this.at);
      this.head(0x12, this.size());
      this.value(v);
    }
  }
}

/** The binary encoding of a message whose only set field, number `field` (< 16), is `struct`. */
export function structFieldBinary(field: number, struct: JsonObject): Uint8Array {
  const sizes = new Sizes();
  const size = sizes.struct(struct);
  const out = Buffer.allocUnsafe(delimited(size));
  const writer = new Writer(out, sizes.list);
  out[writer.at++] = (field << 3) | 2;
  let n = size;
  while (n > 0x7f) {
    out[writer.at++] = (n & 0x7f) | 0x80;
    n >>>= 7;
  }
  out[writer.at++] = n;
  writer.struct(struct);
  if (writer.at !== out.length) throw new Error("struct encoding: size mismatch");
  return out;
}

import { spawnSync } from "node:child_process";
import { type AnyDesc, createFileRegistry, fromBinary, type Registry } from "@bufbuild/protobuf";
import { FileDescriptorSetSchema } from "@bufbuild/protobuf/wkt";
import type { Comments } from "./document.js";

/**
 * The proto files' comments. The descriptors protoc-gen-es embeds in gen/ carry no source
 * info, so the comments come from an image `buf build` makes of the same sources (local, no
 * network), looked up by the full name of each element.
 */
export function commentsFromImage(image: Uint8Array): Comments {
  const registry: Registry = createFileRegistry(fromBinary(FileDescriptorSetSchema, image));
  const lookup = (desc: AnyDesc): AnyDesc | undefined => {
    switch (desc.kind) {
      case "message":
      case "enum":
      case "service":
        return registry.get(desc.typeName);
      case "field": {
        const parent = registry.getMessage(desc.parent.typeName);
        return parent?.fields.find((f) => f.number === desc.number);
      }
      case "rpc": {
        const parent = registry.getService(desc.parent.typeName);
        return parent?.methods.find((m) => m.name === desc.name);
      }
      default:
        return undefined;
    }
  };
  return {
    of(desc) {
      const found = lookup(desc);
      if (found === undefined || found.kind === "file") return undefined;
      const text = (leadingComment(found) ?? "")
        .split("\n")
        .map((line) => line.replace(/^ /, "").trimEnd())
        .join("\n")
        .trim();
      return text === "" ? undefined : text;
    },
  };
}

/** The path of an element in its file's source info (descriptor.proto's field numbers). */
function sourcePath(desc: AnyDesc): number[] | undefined {
  switch (desc.kind) {
    case "message":
    case "enum": {
      const [own, nested] = desc.kind === "message" ? [4, 3] : [5, 4];
      const parent = desc.parent;
      if (parent === undefined) {
        const list: readonly AnyDesc[] =
          desc.kind === "message" ? desc.file.messages : desc.file.enums;
        return [own, list.indexOf(desc)];
      }
      const list: readonly AnyDesc[] =
        desc.kind === "message" ? parent.nestedMessages : parent.nestedEnums;
      const base = sourcePath(parent);
      return base && [...base, nested, list.indexOf(desc)];
    }
    case "field": {
      const base = sourcePath(desc.parent);
      return base && [...base, 2, desc.parent.proto.field.indexOf(desc.proto)];
    }
    case "service":
      return [6, desc.file.services.indexOf(desc)];
    case "rpc":
      return [
        6,
        desc.parent.file.services.indexOf(desc.parent),
        2,
        desc.parent.methods.indexOf(desc),
      ];
    default:
      return undefined;
  }
}

function fileOf(desc: AnyDesc) {
  switch (desc.kind) {
    case "file":
      return desc;
    case "field":
    case "rpc":
      return desc.parent.file;
    case "message":
    case "enum":
    case "service":
      return desc.file;
    default:
      return undefined;
  }
}

function leadingComment(desc: AnyDesc): string | undefined {
  const path = sourcePath(desc);
  const file = fileOf(desc);
  if (path === undefined || file === undefined) return undefined;
  const key = path.join(".");
  const location = file.proto.sourceCodeInfo?.location.find((l) => l.path.join(".") === key);
  return location?.leadingComments;
}

/** Builds an image of the module at `dir` (a buf module path) with its source info. */
export function bufImage(bufBinary: string, dir: string, cwd: string): Uint8Array {
  const run = spawnSync(bufBinary, ["build", dir, "-o", "-#format=binpb"], {
    cwd,
    maxBuffer: 64 * 1024 * 1024,
  });
  if (run.status !== 0) {
    throw new Error(`buf build ${dir} failed: ${run.stderr?.toString() ?? run.error?.message}`);
  }
  return new Uint8Array(run.stdout);
}

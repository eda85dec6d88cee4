import {
  type DescField,
  type DescMessage,
  type DescMethod,
  getOption,
  hasOption,
} from "@bufbuild/protobuf";
import { http } from "../../../gen/google/api/annotations_pb.js";
import type { HttpRule } from "../../../gen/google/api/http_pb.js";
import type { UnarySpec } from "../unary.js";
import { FieldIndex, type FieldTarget, fieldPathKey } from "./fields.js";
import { type PathTemplate, parsePathTemplate, type Variable } from "./path-template.js";

/** How the HTTP body maps to the request message (HttpRule.body). */
export type BodyRule = { kind: "none" } | { kind: "all" } | { kind: "field"; field: DescField };

export interface PathBinding {
  variable: Variable;
  /** The template's field path, e.g. "book.name": named in errors. */
  name: string;
  target: FieldTarget;
}

/** One HTTP binding of one RPC, with everything a request needs precomputed. */
export interface Route {
  /** "<package.Service>.<Method>" */
  rpc: string;
  httpMethod: string;
  template: PathTemplate;
  /** The method and its implementation, called in process behind the router's interceptors. */
  spec: UnarySpec;
  input: DescMessage;
  output: DescMessage;
  body: BodyRule;
  /** HttpRule.response_body: answer with this field of the response only. */
  responseField: DescField | undefined;
  pathBindings: readonly PathBinding[];
  /** Keys (fieldPathKey) of the field paths that path or body bind; query parameters may not set them. */
  boundKeys: ReadonlySet<string>;
  /** Query parameter lookup; undefined when body is "*" (no query parameters then). */
  queryFields: FieldIndex | undefined;
  /**
   * The request's top-level `google.protobuf.Struct` fields when body is "*": their JSON text
   * is kept for the handler (src/server/preset-encoding.ts).
   */
  structFields: readonly DescField[];
}

/** The HTTP bindings of a method's `google.api.http` option, additional bindings included. */
export function httpRulesOf(method: DescMethod): HttpRule[] {
  if (!hasOption(method, http)) return [];
  const rule = getOption(method, http);
  return [rule, ...rule.additionalBindings];
}

/** The HTTP method (upper case) and path template of a binding; undefined when it has none. */
export function methodAndPath(rule: HttpRule): { httpMethod: string; path: string } | undefined {
  const p = rule.pattern;
  switch (p.case) {
    case undefined:
      return undefined;
    case "custom":
      return { httpMethod: p.value.kind.toUpperCase(), path: p.value.path };
    default:
      return { httpMethod: p.case.toUpperCase(), path: p.value };
  }
}

function topLevelField(message: DescMessage, name: string, rpc: string, what: string): DescField {
  const field = message.fields.find((f) => f.name === name);
  if (field === undefined)
    throw new Error(`${rpc}: ${what} "${name}" is not a field of ${message.typeName}`);
  return field;
}

function pathBinding(
  index: FieldIndex,
  input: DescMessage,
  variable: Variable,
  rpc: string,
): PathBinding {
  const name = variable.fieldPath.join(".");
  const resolved = index.resolve(input, name);
  if (resolved.kind !== "ok" || resolved.target.repeated) {
    throw new Error(
      `${rpc}: path variable "${name}" must name a singular scalar field of ${input.typeName}`,
    );
  }
  return { variable, name, target: resolved.target };
}

/** The REST routes of the unary methods, in registration and binding order. */
export function buildRoutes(specs: readonly UnarySpec[]): Route[] {
  const routes: Route[] = [];
  const index = new FieldIndex();
  for (const spec of specs) {
    const method = spec.method;
    const rpc = `${method.parent.typeName}.${method.name}`;
    const rules = httpRulesOf(method);
    if (rules.length > 0) index.add(method.input);
    for (const rule of rules) {
      const mp = methodAndPath(rule);
      if (mp === undefined) continue;
      const template = parsePathTemplate(mp.path);
      const body: BodyRule =
        rule.body === ""
          ? { kind: "none" }
          : rule.body === "*"
            ? { kind: "all" }
            : { kind: "field", field: topLevelField(method.input, rule.body, rpc, "body") };
      const pathBindings = template.variables.map((v) => pathBinding(index, method.input, v, rpc));
      const boundKeys = new Set(pathBindings.map((b) => fieldPathKey(b.target.fields)));
      if (body.kind === "field") boundKeys.add(fieldPathKey([body.field]));
      routes.push({
        rpc,
        httpMethod: mp.httpMethod,
        template,
        spec,
        input: method.input,
        output: method.output,
        body,
        responseField:
          rule.responseBody === ""
            ? undefined
            : topLevelField(method.output, rule.responseBody, rpc, "response_body"),
        pathBindings,
        boundKeys,
        queryFields: body.kind === "all" ? undefined : index,
        structFields:
          body.kind === "all"
            ? method.input.fields.filter(
                (f) => f.fieldKind === "message" && f.message.typeName === "google.protobuf.Struct",
              )
            : [],
      });
    }
  }
  return routes;
}

import { Validator } from "@seriousme/openapi-schema-validator";
import { Ajv2020 } from "ajv/dist/2020.js";
import addFormats from "ajv-formats";
import { type Document, OpenAPIBackend } from "openapi-backend";

/** Formats OpenAPI defines (int64 and uint64 are strings here: their pattern checks them). */
function withOpenApiFormats(ajv: Ajv2020): Ajv2020 {
  addFormats.default(ajv);
  ajv.addFormat("int32", {
    type: "number",
    validate: (n: number) => Number.isInteger(n) && n >= -(2 ** 31) && n < 2 ** 31,
  });
  for (const name of ["int64", "uint64", "float", "double"]) ajv.addFormat(name, true);
  ajv.addFormat("byte", /^[A-Za-z0-9+/_-]*={0,2}$/);
  return ajv;
}

/** The complaints about an answer to an operation; empty when it conforms. */
export type ResponseProblems = (operationId: string, status: number, body: unknown) => string[];

/** The complaints about a request (its path, query and JSON body); empty when it conforms. */
export type RequestProblems = (method: string, pathAndQuery: string, body?: unknown) => string[];

const messages = (errors: { instancePath: string; message?: string }[] | null | undefined) =>
  (errors ?? []).map((e) => `${e.instancePath} ${e.message ?? ""}`.trim());

/**
 * A response validator for an OpenAPI 3.1 document: openapi-backend's, on Ajv's JSON Schema
 * 2020-12 dialect (the one OpenAPI 3.1 uses: prefixItems, const, $ref with siblings).
 */
export async function createValidators(
  document: object,
): Promise<{ response: ResponseProblems; request: RequestProblems }> {
  const api = new OpenAPIBackend({
    definition: structuredClone(document) as Document,
    // Its own check of the document is OpenAPI 3.0's (it refuses `$ref` siblings, `const`,
    // `prefixItems`): skipped; check the document with openApiProblems. Strict: fail on errors.
    quick: true,
    strict: true,
    customizeAjv: (_draft7, options) =>
      withOpenApiFormats(new Ajv2020({ ...options, strict: false, allErrors: true })),
  });
  await api.init();
  return {
    response: (operationId, status, body) =>
      messages(api.validateResponse(body, operationId, status).errors),
    request: (method, pathAndQuery, body) => {
      const [path = "", query = ""] = pathAndQuery.split("?", 2);
      const request = {
        method,
        path,
        query,
        headers: { "content-type": "application/json" },
        ...(body === undefined ? {} : { body }),
      };
      return messages(api.validateRequest(request).errors);
    },
  };
}

/** The response validator of createValidators. */
export async function createResponseValidator(document: object): Promise<ResponseProblems> {
  return (await createValidators(document)).response;
}

/** What makes a document invalid OpenAPI 3.1 (the official schema, with Ajv); empty if valid. */
export async function openApiProblems(document: object): Promise<unknown[]> {
  const result = await new Validator().validate(
    structuredClone(document) as Record<string, unknown>,
  );
  if (result.valid) return [];
  return Array.isArray(result.errors) ? result.errors : [result.errors];
}

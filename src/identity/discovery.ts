import type { JwtAlgorithm } from "../config.js";

/**
 * OAuth 2.0 Authorization Server Metadata (RFC 8414) / OpenID Connect Discovery 1.0, served
 * at `/.well-known/openid-configuration`: what a client or a verifying service needs to know
 * about this issuer without being told (docs/identity.md, "OAuth 2.0 and OpenID Connect").
 */

/** Where the public keys are published (IdentityService.GetJwks). */
export const jwksPath = "/.well-known/jwks.json";
/** Where service accounts ask for tokens (IdentityService.Token, and its form-encoded request). */
export const tokenPath = "/auth/token";

export interface OpenIdConfiguration {
  issuer: string;
  jwksUri: string;
  tokenEndpoint: string;
  tokenEndpointAuthMethodsSupported: string[];
  grantTypesSupported: string[];
  idTokenSigningAlgValuesSupported: string[];
  responseTypesSupported: string[];
  subjectTypesSupported: string[];
}

/**
 * The base of the document's URLs: the issuer when it is an http(s) URL (as OpenID Connect
 * expects, the document then lives under it), else the scheme and host the request came to.
 */
export function publicBaseUrl(issuer: string, requestOrigin: string): string {
  return issuerIsBaseUrl(issuer) ? new URL(issuer).href.replace(/\/+$/, "") : requestOrigin;
}

/** Is the issuer an http(s) URL without query or fragment (the document's base)? */
export function issuerIsBaseUrl(issuer: string): boolean {
  let url: URL;
  try {
    url = new URL(issuer);
  } catch {
    return false;
  }
  return (
    (url.protocol === "https:" || url.protocol === "http:") && url.search === "" && url.hash === ""
  );
}

export function openIdConfiguration(
  jwt: { issuer: string; algorithm: JwtAlgorithm },
  requestOrigin: string,
): OpenIdConfiguration {
  const base = publicBaseUrl(jwt.issuer, requestOrigin);
  return {
    issuer: jwt.issuer,
    jwksUri: base + jwksPath,
    tokenEndpoint: base + tokenPath,
    tokenEndpointAuthMethodsSupported: ["client_secret_basic", "client_secret_post"],
    // People log in with /auth/login, which is not an OAuth grant (no "password" here).
    grantTypesSupported: ["client_credentials"],
    idTokenSigningAlgValuesSupported: [jwt.algorithm],
    // No authorization endpoint: no response type is supported.
    responseTypesSupported: [],
    subjectTypesSupported: ["public"],
  };
}

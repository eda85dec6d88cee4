import { type Client, createClient } from "@connectrpc/connect";
import { IdentityService } from "../../gen/traitgate/identity/v1/identity_pb.js";
import { PolicyService } from "../../gen/traitgate/policy/v1/policy_pb.js";
import type { RequestOrigin } from "../audit/event.js";
import { type HandlerLookup, inProcessTransport } from "./in-process.js";

/** The services the console's server side calls itself (sign-in, refresh, features). */
export interface ConsoleClients {
  identity: Client<typeof IdentityService>;
  policy: Client<typeof PolicyService>;
}

/** Clients of this server's own handlers, calling as the browser at `origin`. */
export function consoleClients(lookup: HandlerLookup, origin: RequestOrigin): ConsoleClients {
  const transport = inProcessTransport(lookup, origin);
  return {
    identity: createClient(IdentityService, transport),
    policy: createClient(PolicyService, transport),
  };
}

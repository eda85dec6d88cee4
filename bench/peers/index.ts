/**
 * The policy benchmark's peers, compiled on their own (bench/tsconfig.json) against
 * bench/node_modules (`npm --prefix bench ci`), so that Traitgate's install, typecheck and
 * build never need them. bench/peers.ts loads this module at run time.
 */
export { casbinEngine } from "./casbin.js";
export { cedarEngine } from "./cedar.js";
export { type CerbosPeer, startCerbos } from "./cerbos.js";

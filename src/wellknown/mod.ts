/**
 * Well-known queries: loader, registry, params resolution and GET decoding.
 *
 * @module
 */
export {
  decodeGetParam,
  type LoadWarning,
  loadWellKnown,
  type ParamDef,
  Registry,
  resolveParams,
  type WellKnown,
} from "./registry.ts";
export { isParamType, jsonKind, matchesType, PARAM_TYPES } from "./params.ts";

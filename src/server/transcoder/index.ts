/**
 * A generic REST transcoder for Connect handlers, driven by the
 * `google.api.http` annotations of the services' methods.
 */
export {
  createRestTranscoder,
  invokeFromHttp,
  listRestRoutes,
  type RestHandler,
  type RestTranscoderOptions,
} from "./transcoder.js";

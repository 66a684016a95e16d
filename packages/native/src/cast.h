/* The float casts' element loops (cast.c), registered on the module's exports by fastio.c. */
#ifndef ST_CONVERT_CAST_H
#define ST_CONVERT_CAST_H
#include <node_api.h>

/* Adds castFloats to `exports`. */
void cast_register(napi_env env, napi_value exports);
#endif

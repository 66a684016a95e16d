/* The JSON form's F32 loops (json.c), registered on the module's exports by fastio.c. */
#ifndef ST_CONVERT_JSON_H
#define ST_CONVERT_JSON_H
#include <node_api.h>

/* Builds the tables; once per process, before json_register. */
void json_initialize(void);
/* Adds formatFloat32s, formatFloat32sAsync, storeFloat32Run and numberRun to `exports`. */
void json_register(napi_env env, napi_value exports);
#endif

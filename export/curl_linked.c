/* The struct curl_api of a program linked with libcurl (the gpuprof command, tests). */
#include "export/curl_api.h"

/* Only programs that link libcurl link this file (library gpuprof_curl_linked): in the agent
 * it would put libcurl in DT_NEEDED. The initializers check each member's type at compile
 * time against <curl/curl.h>. */
static const struct curl_api linked = {
#define GPUPROF_CURL_LINKED(f) .f = curl_##f,
    GPUPROF_CURL_FUNCTIONS(GPUPROF_CURL_LINKED)
#undef GPUPROF_CURL_LINKED
};

const struct curl_api *curl_api_linked(void)
{
  return &linked;
}

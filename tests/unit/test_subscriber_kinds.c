/* cupti/subscriber.c: the activity kinds CUPTI refuses are all named in one stderr line. */
#include <string.h>

#include "cupti/loader.h"
#include "cupti/subscriber.h"
#include "unit.h"

static CUptiResult refusal;

static CUptiResult stub_enable_callback(uint32_t enable, CUpti_SubscriberHandle subscriber,
                                        CUpti_CallbackDomain domain, CUpti_CallbackId cbid)
{
  (void)enable;
  (void)subscriber;
  (void)domain;
  (void)cbid;
  return CUPTI_SUCCESS;
}

static CUptiResult stub_refuse(CUpti_ActivityKind kind)
{
  (void)kind;
  return refusal;
}

static CUptiResult stub_result_string(CUptiResult result, const char **str)
{
  *str = result == CUPTI_ERROR_VIRTUALIZED_DEVICE_NOT_SUPPORTED
             ? "CUPTI_ERROR_VIRTUALIZED_DEVICE_NOT_SUPPORTED"
             : "CUPTI_ERROR_UNKNOWN";
  return CUPTI_SUCCESS;
}

/* A vGPU without profiling refuses every kind with the longest error name CUPTI has: each of
 * the 11 kinds is still named, whole, and the line says no GPU records come. */
static void test_every_kind_named_with_long_errors(void)
{
  static const char *const kinds[] = {
      "CONCURRENT_KERNEL", "MEMCPY",   "MEMCPY2", "MEMSET",  "MEMORY2", "MEMORY_POOL",
      "SYNCHRONIZATION",   "OVERHEAD", "DEVICE",  "CONTEXT", "STREAM"};
  struct stderr_capture c;
  char out[4096], want[128];

  refusal = CUPTI_ERROR_VIRTUALIZED_DEVICE_NOT_SUPPORTED;
  cupti_fn.EnableCallback = stub_enable_callback;
  cupti_fn.ActivityEnable = stub_refuse;
  cupti_fn.ActivityEnableAndDump = stub_refuse;
  cupti_fn.GetResultString = stub_result_string;
  stderr_capture_begin(&c);
  subscriber_enable();
  stderr_capture_end(&c, out, sizeof(out));
  CHECK_EQ(count_lines(out), 1);
  for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
    snprintf(want, sizeof(want), " %s (CUPTI_ERROR_VIRTUALIZED_DEVICE_NOT_SUPPORTED)", kinds[i]);
    CHECK(strstr(out, want) != NULL);
  }
  CHECK(strstr(out, "continuing without any GPU records\n") != NULL);
}

int main(void)
{
  RUN(test_every_kind_named_with_long_errors);
  UNIT_EXIT();
}

/* Unit tests of the context id -> device map (agent/ctx_map.c). */
#include "agent/ctx_map.h"
#include "unit.h"

/* A process that creates and destroys contexts for its whole life (a context per job, or
 * cudaDeviceReset in a loop) keeps getting the right device for the contexts it uses now. */
static void test_many_contexts(void)
{
  const uint32_t n = 4 * CTX_MAP_SLOTS + 7;

  CHECK_EQ(ctx_map_get(1), -1);
  for (uint32_t c = 1; c <= n; c++) {
    ctx_map_set(c, (int32_t)(c % 8));
    CHECK_EQ(ctx_map_get(c), c % 8);
  }
  /* The most recent contexts are all known, whatever came before them. */
  for (uint32_t c = n - CTX_MAP_SLOTS + 1; c <= n; c++)
    CHECK_EQ(ctx_map_get(c), c % 8);
  /* A context id never set is unknown, not another context's device. */
  CHECK_EQ(ctx_map_get(n + 1), -1);
  CHECK_EQ(ctx_map_get(n + CTX_MAP_SLOTS), -1);
  /* A late record of a context older than the one in its slot changes nothing. */
  ctx_map_set(n - CTX_MAP_SLOTS, 3);
  CHECK_EQ(ctx_map_get(n), n % 8);
  CHECK_EQ(ctx_map_get(n - CTX_MAP_SLOTS), -1);
  /* Setting again replaces. */
  ctx_map_set(n, 5);
  CHECK_EQ(ctx_map_get(n), 5);
  CHECK_EQ(ctx_map_devices(), 0xffull);
}

int main(void)
{
  RUN(test_many_contexts);
  UNIT_EXIT();
}

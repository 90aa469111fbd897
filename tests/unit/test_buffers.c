/* Unit tests of the activity buffer pool and the CUPTI buffer callbacks (cupti/buffers.c). */
#include <errno.h>
#include <pthread.h>

#include "cupti/buffers.h"
#include "unit.h"

static void test_pool(void)
{
  struct buffer_pool *p = buffer_pool_new(64 << 10, 256 << 10);
  uint8_t *bufs[4], *extra;

  CHECK(p != NULL);
  CHECK_EQ(buffer_pool_count(p), 4);
  CHECK_EQ(buffer_pool_buffer_size(p), 64 << 10);
  for (int i = 0; i < 4; i++) {
    bufs[i] = buffer_pool_get(p);
    CHECK(bufs[i] != NULL);
    CHECK_EQ((uintptr_t)bufs[i] % 8, 0);
    for (int j = 0; j < i; j++)
      CHECK(bufs[i] != bufs[j]);
  }
  CHECK_EQ(buffer_pool_available(p), 0);
  extra = buffer_pool_get(p);
  CHECK(extra == NULL);
  CHECK_EQ(buffer_pool_exhausted(p), 1);

  /* Returned buffers come back zeroed. */
  memset(bufs[2], 0x5a, 64 << 10);
  CHECK_EQ(buffer_pool_put(p, bufs[2]), 0);
  extra = buffer_pool_get(p);
  CHECK(extra == bufs[2]);
  CHECK_EQ(extra[0], 0);
  CHECK_EQ(extra[(64 << 10) - 1], 0);

  /* Not ours: refused. */
  uint8_t local[16];
  CHECK_EQ(buffer_pool_put(p, local), (unsigned long long)-EINVAL);
  CHECK_EQ(buffer_pool_put(p, bufs[0] + 8), (unsigned long long)-EINVAL);
  CHECK_EQ(buffer_pool_put(p, NULL), (unsigned long long)-EINVAL);
  for (int i = 0; i < 4; i++)
    CHECK_EQ(buffer_pool_put(p, bufs[i]), 0);
  CHECK_EQ(buffer_pool_available(p), 4);
  buffer_pool_free(p);

  /* A limit below one buffer still yields one; sizes round up to 8. */
  p = buffer_pool_new(100001, 10);
  CHECK_EQ(buffer_pool_count(p), 1);
  CHECK_EQ(buffer_pool_buffer_size(p), 100008);
  buffer_pool_free(p);
  buffer_pool_free(NULL);
}

static void test_request_callback(void)
{
  struct buffer_pool *p = buffer_pool_new(64 << 10, 128 << 10);
  uint8_t *b1, *b2, *b3;
  size_t size, max;

  buffers_attach(p);
  buffers_requested(&b1, &size, &max);
  CHECK(b1 != NULL);
  CHECK_EQ(size, 64 << 10);
  CHECK_EQ(max, 0);
  buffers_requested(&b2, &size, &max);
  CHECK(b2 != NULL);
  buffers_requested(&b3, &size, &max); /* exhausted: decline, CUPTI drops and counts */
  CHECK(b3 == NULL);
  CHECK_EQ(size, 0);
  CHECK_EQ(buffer_pool_exhausted(p), 1);
  /* Completion without a running worker: the buffer goes straight back to the pool. */
  buffers_completed(NULL, 0, b1, 64 << 10, 100);
  CHECK_EQ(buffer_pool_available(p), 1);
  buffers_completed(NULL, 0, b2, 64 << 10, 0);
  CHECK_EQ(buffer_pool_available(p), 2);
  buffers_attach(NULL);
  buffer_pool_free(p);
}

#define THREADS 8
static struct buffer_pool *shared;

static void *hammer(void *arg)
{
  uint8_t id = (uint8_t)(uintptr_t)arg;

  for (int i = 0; i < 20000; i++) {
    uint8_t *b = buffer_pool_get(shared);
    if (b) {
      /* Exclusive ownership: a buffer handed out twice would show another thread's mark. */
      CHECK_EQ(b[0], 0);
      b[0] = id;
      for (volatile int spin = 0; spin < 50; spin++)
        ;
      CHECK_EQ(b[0], id);
      buffer_pool_put(shared, b);
    }
  }
  return NULL;
}

static void test_concurrent(void)
{
  pthread_t th[THREADS];

  shared = buffer_pool_new(64 << 10, 4 * (64 << 10));
  for (int i = 0; i < THREADS; i++)
    pthread_create(&th[i], NULL, hammer, (void *)(uintptr_t)(i + 1));
  for (int i = 0; i < THREADS; i++)
    pthread_join(th[i], NULL);
  CHECK_EQ(buffer_pool_available(shared), 4);
  buffer_pool_free(shared);
}

int main(void)
{
  RUN(test_pool);
  RUN(test_request_callback);
  RUN(test_concurrent);
  UNIT_EXIT();
}

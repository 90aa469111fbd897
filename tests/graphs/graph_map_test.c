/* Unit tests of the CUDA graph node map (agent/graph_map.c). */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>

#include "agent/graph_map.h"
#include "tests/unit/unit.h"

static void test_set_get_clone(void)
{
  struct graph_map *m = graph_map_new(100);
  struct graph_map_stats st;

  CHECK(m != NULL);
  CHECK_EQ(graph_map_get(m, 1), 0);
  CHECK_EQ(graph_map_set(m, 1, 11), 0);
  CHECK_EQ(graph_map_set(m, 2, 22), 0);
  CHECK_EQ(graph_map_get(m, 1), 11);
  CHECK_EQ(graph_map_get(m, 2), 22);
  CHECK_EQ(graph_map_get(m, 3), 0);
  /* Instantiation: the clone takes its original's stack; an unknown original gives nothing. */
  CHECK_EQ(graph_map_clone(m, 2, 1002), 0);
  CHECK_EQ(graph_map_get(m, 1002), 22);
  CHECK_EQ(graph_map_clone(m, 5, 1005), -ENOENT);
  CHECK_EQ(graph_map_get(m, 1005), 0);
  /* A second set of one id replaces its stack without a new entry. */
  CHECK_EQ(graph_map_set(m, 1, 12), 0);
  CHECK_EQ(graph_map_get(m, 1), 12);
  CHECK_EQ(graph_map_set(m, 0, 1), -EINVAL);
  CHECK_EQ(graph_map_set(m, 7, 0), -EINVAL);
  graph_map_get_stats(m, &st);
  CHECK_EQ(st.nodes, 3);
  CHECK_EQ(st.clones, 1);
  CHECK_EQ(st.drops, 0);
  graph_map_free(m);
  graph_map_free(NULL);
  CHECK_EQ(graph_map_get(NULL, 1), 0);
}

/* Past the first table (4096 slots) several times: every entry survives the growth. */
static void test_growth_and_bound(void)
{
  const uint64_t n = 20000;
  struct graph_map *m = graph_map_new(2 * n);
  struct graph_map_stats st;
  int wrong = 0;

  /* One generation (n entries) grows through several table sizes and keeps everything. */
  for (uint64_t id = 1; id <= n; id++)
    CHECK_EQ(graph_map_set(m, id * 7919, (uint32_t)(id % 1000) + 1), 0);
  for (uint64_t id = 1; id <= n; id++)
    wrong += graph_map_get(m, id * 7919) != (uint32_t)(id % 1000) + 1;
  CHECK_EQ(wrong, 0);
  CHECK_EQ(graph_map_set(m, 7919, 5), 0);
  CHECK_EQ(graph_map_get(m, 7919), 5);
  graph_map_get_stats(m, &st);
  CHECK_EQ(st.nodes, n);
  CHECK_EQ(st.drops, 0);
  graph_map_free(m);
}

/* Bound 200: generations of 100. What is replayed (looked up) or re-created survives the
 * generation change; the rest is forgotten and counted. */
static void test_generations(void)
{
  struct graph_map *m = graph_map_new(200);
  struct graph_map_stats st;

  for (uint64_t id = 1; id <= 100; id++)
    CHECK_EQ(graph_map_set(m, id, (uint32_t)id + 1), 0);
  /* 101 starts a generation: 1..100 become the previous one, still found. */
  for (uint64_t id = 101; id <= 150; id++)
    CHECK_EQ(graph_map_set(m, id, (uint32_t)id + 1), 0);
  CHECK_EQ(graph_map_get(m, 1), 2); /* promoted */
  CHECK_EQ(graph_map_get(m, 2), 3); /* promoted */
  CHECK_EQ(graph_map_get(m, 1), 2); /* now in the current generation */
  for (uint64_t id = 151; id <= 198; id++)
    CHECK_EQ(graph_map_set(m, id, (uint32_t)id + 1), 0);
  graph_map_get_stats(m, &st);
  CHECK_EQ(st.drops, 0);
  /* The current generation holds 101..198, 1 and 2 (100): 199 forgets 3..100. */
  CHECK_EQ(graph_map_set(m, 199, 200), 0);
  graph_map_get_stats(m, &st);
  CHECK_EQ(st.drops, 98);
  CHECK_EQ(graph_map_get(m, 3), 0);
  CHECK_EQ(graph_map_get(m, 100), 0);
  CHECK_EQ(graph_map_get(m, 1), 2);
  CHECK_EQ(graph_map_get(m, 2), 3);
  CHECK_EQ(graph_map_get(m, 150), 151);
  CHECK_EQ(graph_map_get(m, 199), 200);
  /* A clone of a node from the previous generation is made from it. */
  CHECK_EQ(graph_map_clone(m, 160, 500), 0);
  CHECK_EQ(graph_map_get(m, 500), 161);
  graph_map_free(m);
}

struct reader_arg {
  struct graph_map *m;
  atomic_int *stop;
  int wrong;
};

/* A reader never sees a key with another key's stack, whatever growth is going on. */
static void *reader(void *p)
{
  struct reader_arg *a = p;

  while (!atomic_load(a->stop))
    for (uint64_t id = 1; id <= 5000; id++) {
      uint32_t s = graph_map_get(a->m, id);
      a->wrong += s != 0 && s != (uint32_t)id + 100;
    }
  return NULL;
}

static void test_concurrent_readers(void)
{
  struct graph_map *m = graph_map_new(100000);
  atomic_int stop = 0;
  struct reader_arg a = {m, &stop, 0};
  pthread_t t;

  CHECK_EQ(pthread_create(&t, NULL, reader, &a), 0);
  for (uint64_t id = 1; id <= 50000; id++)
    graph_map_set(m, id, (uint32_t)id + 100);
  atomic_store(&stop, 1);
  pthread_join(t, NULL);
  CHECK_EQ(a.wrong, 0);
  CHECK_EQ(graph_map_get(m, 4999), 5099);
  graph_map_free(m);
}

static void test_global(void)
{
  CHECK(graph_map_peek() == NULL);
  CHECK_EQ(graph_map_lookup(5), 0);
  struct graph_map *g = graph_map_global();
  CHECK(g != NULL);
  CHECK(graph_map_peek() == g);
  CHECK(graph_map_global() == g);
  CHECK_EQ(graph_map_set(g, 5, 9), 0);
  CHECK_EQ(graph_map_lookup(5), 9);
  CHECK_EQ(graph_map_lookup(0), 0);
}

int main(void)
{
  RUN(test_set_get_clone);
  RUN(test_growth_and_bound);
  RUN(test_generations);
  RUN(test_concurrent_readers);
  RUN(test_global);
  UNIT_EXIT();
}

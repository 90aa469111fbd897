/* Unit tests of the stack table (agent/stack.c): dedup, dense ids, parent links, many threads,
 * the memory cap. */
#include <errno.h>
#include <pthread.h>

#include "agent/stack.h"
#include "unit.h"

static void test_dedup_and_dense_ids(void)
{
  struct stack_table *t = stack_table_new(1 << 20);
  uint64_t a[] = {0x1003, 0x2002, 0x3001}; /* leaf first */
  uint64_t b[] = {0x1004, 0x2002, 0x3001}; /* same callers, another leaf */
  uint64_t c[] = {0x2002, 0x3001};         /* a prefix of both */
  uint64_t out[8], frame;
  uint32_t ia, ib, ic, parent;
  struct stack_table_stats st;

  ia = stack_table_intern(t, a, 3);
  ib = stack_table_intern(t, b, 3);
  ic = stack_table_intern(t, c, 2);
  CHECK_EQ(ia, 3); /* ids in creation order: 0x3001 -> 1, 0x2002 -> 2, 0x1003 -> 3 */
  CHECK_EQ(ib, 4); /* shares two nodes with a */
  CHECK_EQ(ic, 2); /* an inner node is a stack too */
  CHECK_EQ(stack_table_intern(t, a, 3), ia);
  CHECK_EQ(stack_table_intern(t, NULL, 0), STACK_ID_NONE);
  CHECK_EQ(stack_table_get(t, ib, out, 8), 3);
  CHECK(out[0] == 0x1004 && out[1] == 0x2002 && out[2] == 0x3001);
  CHECK_EQ(stack_table_node(t, 1, &frame, &parent), 0);
  CHECK(frame == 0x3001 && parent == 0);
  CHECK_EQ(stack_table_node(t, 5, &frame, &parent), -ENOENT);
  stack_table_get_stats(t, &st);
  CHECK_EQ(st.nodes, 4);
  CHECK_EQ(st.stacks, 3);
  CHECK_EQ(st.interned, 4);
  CHECK_EQ(st.drops, 0);
  stack_table_free(t);
}

#define THREADS 8
#define PATHS 2000

struct worker {
  struct stack_table *t;
  int index;
  uint32_t ids[PATHS];
};

/* Every thread interns the same PATHS stacks (in a different order): all must agree. */
static void *intern_all(void *arg)
{
  struct worker *w = arg;
  uint64_t frames[24];

  for (int k = 0; k < PATHS; k++) {
    int p = (k * 7 + w->index * 13) % PATHS;
    for (int i = 0; i < 24; i++) /* leaf first: 4 frames per path below 20 shared callers */
      frames[i] = 0x10000 + (uint64_t)(i >= 4 ? i : (p + 1) * 64 + i);
    w->ids[p] = stack_table_intern(w->t, frames, 24);
  }
  return NULL;
}

static void test_threads(void)
{
  struct stack_table *t = stack_table_new(64 << 20);
  static struct worker w[THREADS];
  pthread_t th[THREADS];
  struct stack_table_stats st;
  int agree = 1, dense = 1;

  for (int i = 0; i < THREADS; i++) {
    w[i].t = t;
    w[i].index = i;
    pthread_create(&th[i], NULL, intern_all, &w[i]);
  }
  for (int i = 0; i < THREADS; i++)
    pthread_join(th[i], NULL);
  for (int p = 0; p < PATHS; p++)
    for (int i = 1; i < THREADS; i++)
      agree &= w[i].ids[p] == w[0].ids[p] && w[0].ids[p] != 0;
  CHECK(agree);
  stack_table_get_stats(t, &st);
  /* The 20 outer frames are shared: 4 new nodes per path. */
  CHECK_EQ(st.nodes, 20 + PATHS * 4);
  CHECK_EQ(st.stacks, PATHS);
  for (int p = 0; p < PATHS; p++)
    dense &= w[0].ids[p] >= 1 && w[0].ids[p] <= st.nodes;
  CHECK(dense);
  CHECK_EQ(st.drops, 0);
  stack_table_free(t);
}

static void test_cap(void)
{
  struct stack_table *t = stack_table_new(64 << 10); /* the minimum */
  struct stack_table_stats st;
  uint64_t f[2];
  uint32_t last = 1;
  int n = 0;

  for (int i = 0; i < 100000 && last; i++, n++) {
    f[0] = 0x5000 + (uint64_t)i;
    f[1] = 0x9000;
    last = stack_table_intern(t, f, 2);
  }
  stack_table_get_stats(t, &st);
  CHECK(last == STACK_ID_NONE);
  CHECK_EQ(st.drops, 1);
  CHECK(st.bytes <= st.max_bytes);
  CHECK(st.nodes > 1000);
  /* Known stacks still resolve when full. */
  f[0] = 0x5000;
  CHECK_EQ(stack_table_intern(t, f, 2), 2);
  stack_table_free(t);
}

int main(void)
{
  RUN(test_dedup_and_dense_ids);
  RUN(test_threads);
  RUN(test_cap);
  UNIT_EXIT();
}

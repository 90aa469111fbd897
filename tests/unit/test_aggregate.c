/* Unit tests of the join and aggregation (agent/aggregate.c). */
#include "agent/aggregate.h"
#include "agent/corr.h"
#include "unit.h"

static void call(struct corr_table *t, uint32_t id, uint8_t domain, const char *name)
{
  struct corr_info info = {
      .corr_id = id, .tid = 1, .domain = domain, .api_name = name, .enter_ns = 1};
  corr_table_enter(t, &info);
}

static struct event kernel(const char *name, uint32_t corr, uint64_t start, uint64_t end,
                           uint32_t stream)
{
  struct event ev = {.kind = EVENT_KERNEL,
                     .start_ns = start,
                     .end_ns = end,
                     .device = 0,
                     .context = 1,
                     .stream = stream,
                     .corr_id = corr};
  ev.u.kernel.name = name;
  if (!start || !end)
    ev.flags |= EVENT_F_NO_TIMING;
  return ev;
}

static void test_api_names(void)
{
  char buf[64];

  aggregate_api_base_name("cudaLaunchKernel_v7000", buf, sizeof(buf));
  CHECK_STR(buf, "cudaLaunchKernel");
  aggregate_api_base_name("__cudaLaunchKernel_ptsz_v13000", buf, sizeof(buf));
  CHECK_STR(buf, "__cudaLaunchKernel_ptsz");
  aggregate_api_base_name("cuMemAlloc_v2", buf, sizeof(buf));
  CHECK_STR(buf, "cuMemAlloc");
  aggregate_api_base_name("cuMemcpyHtoD_v2_ptds", buf, sizeof(buf));
  CHECK_STR(buf, "cuMemcpyHtoD_v2_ptds");
  aggregate_api_base_name("cuLaunchKernel", buf, sizeof(buf));
  CHECK_STR(buf, "cuLaunchKernel");
  aggregate_api_base_name("cuda_v", buf, sizeof(buf));
  CHECK_STR(buf, "cuda_v");
  aggregate_api_base_name("x_v12", buf, 3);
  CHECK_STR(buf, "x");
  CHECK_STR(aggregate_copy_kind_name(EVENT_COPY_HTOD), "HtoD");
  CHECK_STR(aggregate_copy_kind_name(EVENT_COPY_PTOP), "PtoP");
  CHECK(aggregate_copy_kind_name(99) == NULL);
}

static void test_join_and_sort(void)
{
  struct corr_table *t = corr_table_new(1024);
  struct aggregate *a = aggregate_new(t);
  struct agg_kernel **ks;
  struct agg_stream **ss;
  struct event ev;
  size_t n;

  call(t, 1, CORR_DOMAIN_RUNTIME, "cudaLaunchKernel_v7000");
  call(t, 2, CORR_DOMAIN_RUNTIME, "__cudaLaunchKernel_v13000");
  call(t, 3, CORR_DOMAIN_DRIVER, "cuLaunchKernel");
  call(t, 10, CORR_DOMAIN_DRIVER, "cuMemcpyHtoD_v2");
  call(t, 11, CORR_DOMAIN_RUNTIME, "cudaMemcpy_v3020");

  ev = kernel("_Z1bv", 1, 100, 200, 7);
  aggregate_event(a, &ev, NULL);
  ev = kernel("_Z1bv", 2, 300, 400, 7);
  aggregate_event(a, &ev, NULL);
  ev = kernel("_Z1av", 3, 500, 700, 9);
  aggregate_event(a, &ev, NULL);
  ev = kernel("_Z1cv", 55, 0, 0, 7); /* unknown call, no timing */
  aggregate_event(a, &ev, NULL);

  /* A memcpy joins by its runtime id when that call is known, else by the driver one. */
  ev = (struct event){.kind = EVENT_MEMCPY,
                      .start_ns = 800,
                      .end_ns = 900,
                      .stream = 7,
                      .context = 1,
                      .corr_id = 10,
                      .runtime_corr_id = 11};
  ev.u.memcpy.copy_kind = EVENT_COPY_HTOD;
  ev.u.memcpy.bytes = 4096;
  aggregate_event(a, &ev, NULL);
  ev.runtime_corr_id = 999;
  ev.u.memcpy.copy_kind = EVENT_COPY_DTOH;
  aggregate_event(a, &ev, NULL);

  aggregate_lock(a);
  const struct agg_totals *tt = aggregate_totals(a);
  CHECK_EQ(tt->kernels, 4);
  CHECK_EQ(tt->kernel_time_ns, 400);
  CHECK_EQ(tt->joins_runtime, 3);
  CHECK_EQ(tt->joins_driver, 2);
  CHECK_EQ(tt->joins_unknown, 1);
  CHECK_EQ(tt->window_start_ns, 100);
  CHECK_EQ(tt->window_end_ns, 900);
  CHECK_EQ(tt->memcpy[EVENT_COPY_HTOD].count, 1);
  CHECK_EQ(tt->memcpy[EVENT_COPY_HTOD].bytes, 4096);
  CHECK_EQ(tt->memcpy[EVENT_COPY_DTOH].gpu_time_ns, 100);

  /* _Z1av and _Z1bv both have 200 ns: ties break by name. */
  n = aggregate_kernels_sorted(a, &ks);
  CHECK_EQ(n, 3);
  CHECK_STR(ks[0]->name, "_Z1av");
  CHECK_STR(ks[1]->name, "_Z1bv");
  CHECK_STR(ks[2]->name, "_Z1cv");
  CHECK_EQ(ks[1]->count, 2);
  CHECK_EQ(ks[1]->n_apis, 2);
  CHECK_STR(ks[1]->apis[0].api, "__cudaLaunchKernel"); /* sorted by name */
  CHECK_STR(ks[1]->apis[1].api, "cudaLaunchKernel");
  CHECK_STR(ks[0]->apis[0].api, "cuLaunchKernel");
  CHECK_STR(ks[2]->apis[0].api, "?");
  CHECK_EQ(ks[2]->gpu_time_ns, 0);
  CHECK_EQ(ks[1]->n_streams, 1);
  free(ks);

  n = aggregate_streams_sorted(a, &ss);
  CHECK_EQ(n, 2);
  CHECK_EQ(ss[0]->key.stream, 7);
  CHECK_EQ(ss[0]->kernels, 3);
  CHECK_EQ(ss[0]->memcpys, 2);
  CHECK_EQ(ss[1]->key.stream, 9);
  free(ss);
  aggregate_unlock(a);

  aggregate_free(a);
  corr_table_free(t);
}

int main(void)
{
  RUN(test_api_names);
  RUN(test_join_and_sort);
  UNIT_EXIT();
}

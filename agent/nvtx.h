/* NVTX ranges in trace captures: the NVTX injection entry point, its gate, and the callbacks. */
#ifndef GPUPROF_AGENT_NVTX_H
#define GPUPROF_AGENT_NVTX_H

#include <stdint.h>

#include <cupti.h>

/*
 * How NVTX reaches a trace (docs/TRACES.md "NVTX"):
 *
 *  1. NVTX_INJECTION64_PATH names libgpuprof.so. Each module's NVTX loader (NVIDIA's
 *     header-only nvtx3, in the application, libnccl, libtorch...) calls
 *     InitializeInjectionNvtx2 on its first NVTX call, possibly before cuInit. The agent puts
 *     its own functions (the gate) into the module's slots for the calls it records and leaves
 *     the others alone, so they become no-ops (nvtxNameOsThread*, which crashes inside CUPTI
 *     13.0's NVTX injection, cupti.md 1.3, among them).
 *  2. Once the agent is active (InitializeInjection subscribed), it hands CUPTI one table of
 *     its own through cuptiNvtxInitialize2 (CUPTI fills it with its implementations). From then
 *     on the gate forwards each call to CUPTI, which makes the CUPTI_CB_DOMAIN_NVTX callback.
 *     Before that, in a forked child, and once the agent stops, the gate forwards nothing:
 *     CUPTI 13.0 without an initialized session crashes inside nvtxRangePushA
 *     (tests/fakegpu/README.md "NVTX").
 *  3. Domains and registered strings are the agent's objects; the CUPTI handle of each is made
 *     the first time a forwarded call needs it, so a domain created before cuInit works later.
 *  4. During a full capture the callbacks pair pushes with pops on the calling thread and
 *     queue each range, mark and start/end range to the thread's capture ring
 *     (capture_nvtx); the worker writes them.
 */

/* GPUPROF_NVTX=0 (read at the first NVTX initialization) or GPUPROF_MODE=off: the gate is
 * never installed and NVTX stays a no-op in every module. */

/* The agent became active (agent/agent.c, after the subscriber enabled its callbacks). */
void nvtx_agent_active(void);

/* CUPTI_CB_DOMAIN_NVTX callbacks (cupti/subscriber.c, inside the agent's guard). */
void nvtx_on_callback(CUpti_CallbackId cbid, const void *cbdata);

/* Capture start/end (agent/capture.c): seq is the capture's number; ranges are paired only
 * within one capture. */
void nvtx_capture_begin(uint32_t seq);
void nvtx_capture_end(void);

/* The domain name of an index queued by capture_nvtx (0: the default domain, NULL). */
const char *nvtx_domain_name(uint32_t index);

struct nvtx_stats {
  uint64_t unmatched; /* pops and ends without their push or start in this capture */
  uint64_t crossed;   /* pushes of one domain popped while another domain's were open on top */
  uint64_t dropped;   /* ranges not recorded: stack or start table full, too many names */
};
void nvtx_get_stats(struct nvtx_stats *out);

#endif

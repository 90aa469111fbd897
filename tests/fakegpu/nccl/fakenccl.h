/* Private interface between the NCCL double's source files (communicators, enqueue, plugin). */
#ifndef FAKEGPU_NCCL_FAKENCCL_H
#define FAKEGPU_NCCL_FAKENCCL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda.h>
#include <nccl.h>

#include "tests/fakegpu/nccl/profiler_abi.h"

#define FGN_API __attribute__((visibility("default")))
#define FGN_MAGIC 0x0280a281u /* arbitrary: tells a live comm from freed or foreign memory */

/* NCCL's ncclFunc_t numbering (src/include/device.h), used for comm->seq_number[]. */
enum fgn_func {
  FGN_FUNC_BROADCAST = 0,
  FGN_FUNC_REDUCE,
  FGN_FUNC_ALLGATHER,
  FGN_FUNC_REDUCESCATTER,
  FGN_FUNC_ALLREDUCE,
  FGN_FUNC_SENDRECV,
  FGN_FUNC_SEND,
  FGN_FUNC_RECV,
  FGN_FUNC_COUNT
};

/* One enqueued collective or p2p operation (NCCL's ncclTaskColl / ncclTaskP2p). */
struct fgn_task {
  enum fgn_func func;
  const void *sendbuff;
  void *recvbuff; /* p2p: the user buffer */
  size_t count;   /* AllGather/Broadcast: bytes, as collTaskAppend rewrites it */
  int root;       /* p2p: the peer */
  ncclDataType_t datatype;
  ncclRedOp_t op;
  size_t traffic;   /* bytes, NCCL's trafficBytes: orders a plan's collectives */
  int kernel_round; /* p2p: NCCL's p2p schedule round with this peer */
  int mask;         /* ncclProfilerApiState.eActivationMask when the call was made */
  void *group_api;  /* the GroupApi event handle the call saw */
  void *api;        /* the CollApi / P2pApi event handle the call saw */
  void *event;      /* the Coll / P2p event handle */
  uint8_t nchannels;
  uint8_t nwarps;
  bool matched; /* p2p receive already paired with a send (data.c) */
  struct fgn_task *next;
};

/* A kernel launch for the tasks one communicator collected in a group (NCCL's ncclKernelPlan). */
struct fgn_plan {
  struct fgn_task *colls; /* NCCL's plan->collTaskQueue order */
  struct fgn_task *p2ps;  /* plan->p2pTaskQueue order */
  char kernel[128];       /* mangled name */
  unsigned grid, block;
  CUstream stream;
  void *kernel_launch; /* KernelLaunch event handle */
  void *group;         /* Group event handle */
};

struct ncclComm {
  uint32_t start_magic;
  int rank, nranks, nnodes, dev;
  uint64_t comm_hash;
  char *comm_name;         /* config->commName copy, NULL without one (NCCL's default) */
  struct ncclComm *clique; /* NCCL's intraComm0: the comms of one ncclCommInitAll share it */
  CUcontext ctx;           /* the device's primary context, where NCCL launches */
  void *profiler_context;
  bool finalized;
  uint64_t seq_number[FGN_FUNC_COUNT];
  /* group state (owned by the thread whose group the comm joined) */
  bool joined;
  struct ncclComm *group_next;
  struct fgn_task *colls, *p2ps; /* tasks in call order */
  CUstream first_stream;         /* planner->streams->stream: where the kernel goes */
  bool have_stream;
  uint32_t end_magic;
};

/* ---- logging (nccl.c) ---- */

/* NCCL's WARN: remembered for ncclGetLastError, printed on stderr when NCCL_DEBUG asks. */
void fgn_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* NCCL's INFO: stderr only with NCCL_DEBUG=INFO (the real library prints on stdout). */
void fgn_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- profiler plugin (plugin.c): one function per ncclProfiler* wrapper of 2.28.9 ---- */

/* The per-thread ncclProfilerApiState of NCCL. */
struct fgn_api_state {
  int mask;
  int profiler_group_depth;
  int state; /* 0 reset, 1 started, 2 stopped */
  void *group_api;
  void *p2p_api;
  void *coll_api;
};
extern __thread struct fgn_api_state fgn_api;
extern __thread int fgn_group_depth; /* NCCL's ncclGroupDepth */

void fgn_plugin_init(struct ncclComm *comm);
void fgn_plugin_finalize(struct ncclComm *comm);
bool fgn_plugin_loaded(void);
void fgn_start_group_api(struct ncclComm *comm, bool captured);
void fgn_stop_group_api(void);
void fgn_record_group_api(int state);
void fgn_start_coll_api(struct ncclComm *comm, enum fgn_func func, size_t count,
                        ncclDataType_t type, int root, CUstream stream, bool captured);
void fgn_stop_coll_api(void);
void fgn_start_p2p_api(struct ncclComm *comm, enum fgn_func func, size_t count, ncclDataType_t type,
                       CUstream stream, bool captured);
void fgn_stop_p2p_api(void);
void fgn_start_kernel_launch(struct ncclComm *comm, struct fgn_plan *plan);
void fgn_stop_kernel_launch(struct fgn_plan *plan);
void fgn_start_group(struct ncclComm *comm, struct fgn_plan *plan);
void fgn_stop_group(struct fgn_plan *plan);
void fgn_start_tasks(struct ncclComm *comm, struct fgn_plan *plan);
void fgn_stop_tasks(struct fgn_plan *plan);

/* ---- data movement (data.c) ---- */

/* Writes the results of the collectives and sends/receives the comms of one clique queued in
 * this group, when every rank of the comm is among them (members: n comms, any order). */
void fgn_move_data(struct ncclComm **members, int n);

/* NCCL's string tables (src/misc/utils.cc / enqueue.cc of 2.28). */
const char *fgn_func_name(enum fgn_func f);
const char *fgn_type_name(ncclDataType_t t);

#endif

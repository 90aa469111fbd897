/* The NCCL profiler plugin ABI (v3, v4, v5 as NCCL 2.28.9 loads them), written for the double. */
#ifndef FAKEGPU_NCCL_PROFILER_ABI_H
#define FAKEGPU_NCCL_PROFILER_ABI_H

/*
 * Layouts from the facts in shared/reference/cupti.md 4.3 (the plugin's side of the contract);
 * names are this project's own. Only what the double produces is spelled out; the proxy and
 * net-plugin members are kept so that the unions have NCCL's size and alignment.
 */

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <nccl.h>

enum {
  FGN_PROFILE_GROUP = 1 << 0,
  FGN_PROFILE_COLL = 1 << 1,
  FGN_PROFILE_P2P = 1 << 2,
  FGN_PROFILE_PROXY_OP = 1 << 3,
  FGN_PROFILE_PROXY_STEP = 1 << 4,
  FGN_PROFILE_PROXY_CTRL = 1 << 5,
  FGN_PROFILE_KERNEL_CH = 1 << 6,
  FGN_PROFILE_NET_PLUGIN = 1 << 7,
  FGN_PROFILE_GROUP_API = 1 << 8,
  FGN_PROFILE_COLL_API = 1 << 9,
  FGN_PROFILE_P2P_API = 1 << 10,
  FGN_PROFILE_KERNEL_LAUNCH = 1 << 11,
};

/* Event states the double records (numbering of ncclProfilerEventState_v5_t). */
enum {
  FGN_STATE_GROUP_START_API_STOP = 23,
  FGN_STATE_GROUP_END_API_START = 24,
};

/* NCCL's ncclDebugLogger_t; level is its ncclDebugLogLevel enum (0 none .. 5 trace). */
typedef void (*fgn_logger_t)(int level, unsigned long flags, const char *file, int line,
                             const char *fmt, ...);

struct fgn_proxy_op {
  pid_t pid;
  uint8_t channelId;
  int peer;
  int nSteps;
  int chunkSize;
  int isSend;
};

/* ---- v5 ---- */

typedef struct {
  uint64_t type;
  void *parentObj;
  int rank;
  union {
    struct {
      bool graphCaptured;
      int groupDepth;
    } groupApi;
    struct {
      const char *func;
      size_t count;
      const char *datatype;
      int root;
      void *stream;
      bool graphCaptured;
    } collApi;
    struct {
      const char *func;
      size_t count;
      const char *datatype;
      void *stream;
      bool graphCaptured;
    } p2pApi;
    struct {
      void *stream;
    } kernelLaunch;
    struct {
      uint64_t seqNumber;
      const char *func;
      const void *sendBuff;
      void *recvBuff;
      size_t count;
      int root;
      const char *datatype;
      uint8_t nChannels;
      uint8_t nWarps;
      const char *algo;
      const char *proto;
      void *parentGroup;
    } coll;
    struct {
      const char *func;
      void *buff;
      const char *datatype;
      size_t count;
      int peer;
      uint8_t nChannels;
      void *parentGroup;
    } p2p;
    struct fgn_proxy_op proxyOp;
    struct {
      int step;
    } proxyStep;
    struct {
      uint8_t channelId;
      uint64_t pTimer;
    } kernelCh;
    struct {
      int64_t id;
      void *data;
    } netPlugin;
  };
} fgn_descr_v5;

typedef union {
  struct {
    size_t transSize;
  } proxyStep;
  struct {
    int appendedProxyOps;
  } proxyCtrl;
  struct {
    void *data;
  } netPlugin;
  struct {
    uint64_t pTimer;
  } kernelCh;
} fgn_state_args_v5;

typedef struct {
  const char *name;
  ncclResult_t (*init)(void **context, uint64_t commId, int *eActivationMask, const char *commName,
                       int nNodes, int nranks, int rank, fgn_logger_t logfn);
  ncclResult_t (*startEvent)(void *context, void **eHandle, fgn_descr_v5 *eDescr);
  ncclResult_t (*stopEvent)(void *eHandle);
  ncclResult_t (*recordEventState)(void *eHandle, int eState, fgn_state_args_v5 *eStateArgs);
  ncclResult_t (*finalize)(void *context);
} fgn_profiler_v5;

/* ---- v4: no API or launch events; uint8_t type; init takes commName before commHash ---- */

typedef struct {
  uint8_t type;
  void *parentObj;
  int rank;
  union {
    struct {
      uint64_t seqNumber;
      const char *func;
      const void *sendBuff;
      void *recvBuff;
      size_t count;
      int root;
      const char *datatype;
      uint8_t nChannels;
      uint8_t nWarps;
      const char *algo;
      const char *proto;
    } coll;
    struct {
      const char *func;
      void *buff;
      const char *datatype;
      size_t count;
      int peer;
      uint8_t nChannels;
    } p2p;
    struct fgn_proxy_op proxyOp;
    struct {
      int step;
    } proxyStep;
    struct {
      uint8_t channelId;
      uint64_t pTimer;
    } kernelCh;
    struct {
      int64_t id;
      void *data;
    } netPlugin;
  };
} fgn_descr_v4;

typedef fgn_state_args_v5 fgn_state_args_v4;

typedef struct {
  const char *name;
  ncclResult_t (*init)(void **context, int *eActivationMask, const char *commName,
                       uint64_t commHash, int nNodes, int nranks, int rank, fgn_logger_t logfn);
  ncclResult_t (*startEvent)(void *context, void **eHandle, fgn_descr_v4 *eDescr);
  ncclResult_t (*stopEvent)(void *eHandle);
  ncclResult_t (*recordEventState)(void *eHandle, int eState, fgn_state_args_v4 *eStateArgs);
  ncclResult_t (*finalize)(void *context);
} fgn_profiler_v4;

/* ---- v3: init(context, mask) only; coll/p2p still carry name and commHash (left 0) ---- */

typedef struct {
  uint8_t type;
  void *parentObj;
  int rank;
  union {
    struct {
      const char *name;
      uint64_t commHash;
      uint64_t seqNumber;
      const char *func;
      const void *sendBuff;
      void *recvBuff;
      size_t count;
      int root;
      const char *datatype;
      uint8_t nMaxChannels;
      uint8_t nWarps;
      const char *algo;
      const char *proto;
    } coll;
    struct {
      const char *name;
      uint64_t commHash;
      const char *func;
      void *buff;
      const char *datatype;
      size_t count;
      int peer;
    } p2p;
    struct fgn_proxy_op proxyOp;
    struct {
      int step;
    } proxyStep;
    struct {
      uint8_t channelId;
    } kernelCh;
    struct {
      int64_t id;
      void *data;
    } netPlugin;
  };
} fgn_descr_v3;

typedef union {
  struct {
    size_t transSize;
    int steps;
  } proxyOp;
  struct {
    int appendedProxyOps;
  } proxyCtrl;
} fgn_state_args_v3;

typedef struct {
  const char *name;
  ncclResult_t (*init)(void **context, int *eActivationMask);
  ncclResult_t (*startEvent)(void *context, void **eHandle, fgn_descr_v3 *eDescr);
  ncclResult_t (*stopEvent)(void *eHandle);
  ncclResult_t (*recordEventState)(void *eHandle, int eState, fgn_state_args_v3 *eStateArgs);
  ncclResult_t (*finalize)(void *context);
} fgn_profiler_v3;

#endif

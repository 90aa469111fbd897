/* The NCCL profiler plugin ABI (v5, v4, v3) as the tests call it, declared apart from the
 * agent's own declarations (cupti/nccl_plugin.c) so that a layout mistake on either side shows.
 */
#ifndef GPUPROF_TESTS_NCCL_ABI_H
#define GPUPROF_TESTS_NCCL_ABI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
  T_GROUP = 1,
  T_COLL = 2,
  T_P2P = 4,
  T_PROXY_OP = 8,
  T_GROUP_API = 256,
  T_COLL_API = 512,
  T_P2P_API = 1024,
  T_KERNEL_LAUNCH = 2048
};

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
    struct {
      int pid;
      uint8_t channelId;
      int peer;
      int nSteps;
      int chunkSize;
      int isSend;
    } proxyOp;
  };
} descr_v5;

typedef struct {
  const char *name;
  int (*init)(void **ctx, uint64_t commId, int *mask, const char *commName, int nNodes, int nranks,
              int rank, void *logfn);
  int (*startEvent)(void *ctx, void **h, descr_v5 *d);
  int (*stopEvent)(void *h);
  int (*recordEventState)(void *h, int state, void *args);
  int (*finalize)(void *ctx);
} profiler_v5;

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
  };
} descr_v4;

typedef struct {
  const char *name;
  int (*init)(void **ctx, int *mask, const char *commName, uint64_t commHash, int nNodes,
              int nranks, int rank, void *logfn);
  int (*startEvent)(void *ctx, void **h, descr_v4 *d);
  int (*stopEvent)(void *h);
  int (*recordEventState)(void *h, int state, void *args);
  int (*finalize)(void *ctx);
} profiler_v4;

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
  };
} descr_v3;

typedef struct {
  const char *name;
  int (*init)(void **ctx, int *mask);
  int (*startEvent)(void *ctx, void **h, descr_v3 *d);
  int (*stopEvent)(void *h);
  int (*recordEventState)(void *h, int state, void *args);
  int (*finalize)(void *ctx);
} profiler_v3;

#endif

/* The NCCL profiler plugin ABI (v5, v4, v3) as the tests call it: the NCCL double's
 * declarations (tests/fakegpu/nccl/profiler_abi.h, written apart from the agent's own in
 * cupti/nccl_plugin.c so that a layout mistake on either side shows), under short names. */
#ifndef GPUPROF_TESTS_NCCL_ABI_H
#define GPUPROF_TESTS_NCCL_ABI_H

#include "tests/fakegpu/nccl/profiler_abi.h"

enum {
  T_GROUP = FGN_PROFILE_GROUP,
  T_COLL = FGN_PROFILE_COLL,
  T_P2P = FGN_PROFILE_P2P,
  T_PROXY_OP = FGN_PROFILE_PROXY_OP,
  T_GROUP_API = FGN_PROFILE_GROUP_API,
  T_COLL_API = FGN_PROFILE_COLL_API,
  T_P2P_API = FGN_PROFILE_P2P_API,
  T_KERNEL_LAUNCH = FGN_PROFILE_KERNEL_LAUNCH
};

typedef fgn_descr_v5 descr_v5;
typedef fgn_profiler_v5 profiler_v5;
typedef fgn_descr_v4 descr_v4;
typedef fgn_profiler_v4 profiler_v4;
typedef fgn_descr_v3 descr_v3;
typedef fgn_profiler_v3 profiler_v3;

#endif

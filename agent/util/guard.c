/* Storage of the per-thread reentrancy guard (see guard.h). */
#include "agent/util/guard.h"

__thread int guard_in_agent;

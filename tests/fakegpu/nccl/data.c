/* The NCCL double's data movement: what a group's collectives do to the buffers of local ranks. */
#include <stdlib.h>
#include <string.h>

#include "tests/fakegpu/fakegpu.h"
#include "tests/fakegpu/nccl/fakenccl.h"

/*
 * Simulated device memory is host memory (tests/fakegpu/README.md, Memory), so the result of a
 * collective can be written at launch, as the fake GPU moves copy data at submission. This is
 * only possible when every rank of the comm lives in this process and called its part in the
 * same group (ncclCommInitAll, then one call per rank between ncclGroupStart/End): the i-th
 * collective of each rank are matched, as NCCL requires all ranks to call them in one order.
 * Anything else (imaginary ranks, a rank that did not call, a buffer the simulated driver does
 * not know) moves no data: on hardware that would hang or fault, which is not simulated.
 */

union acc {
  double f;
  int64_t i;
  uint64_t u;
};

enum kind { KIND_FLOAT, KIND_INT, KIND_UINT, KIND_NONE };

static enum kind type_kind(ncclDataType_t t)
{
  switch (t) {
  case ncclInt8:
  case ncclInt32:
  case ncclInt64:
    return KIND_INT;
  case ncclUint8:
  case ncclUint32:
  case ncclUint64:
    return KIND_UINT;
  case ncclFloat16:
  case ncclBfloat16:
  case ncclFloat32:
  case ncclFloat64:
    return KIND_FLOAT;
  default:
    return KIND_NONE; /* fp8: copies only */
  }
}

static size_t type_bytes(ncclDataType_t t)
{
  switch (t) {
  case ncclInt8:
  case ncclUint8:
  case ncclFloat8e4m3:
  case ncclFloat8e5m2:
    return 1;
  case ncclFloat16:
  case ncclBfloat16:
    return 2;
  case ncclInt32:
  case ncclUint32:
  case ncclFloat32:
    return 4;
  default:
    return 8;
  }
}

/* IEEE half <-> float, round to nearest even on the way down. */
static float half_to_float(uint16_t h)
{
  uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
  if (exp == 0x1f)
    bits = sign | 0x7f800000u | (man << 13);
  else if (exp)
    bits = sign | ((exp + 112) << 23) | (man << 13);
  else if (!man)
    bits = sign;
  else {
    exp = 113;
    while (!(man & 0x400)) {
      man <<= 1;
      exp--;
    }
    bits = sign | (exp << 23) | ((man & 0x3ff) << 13);
  }
  float f;
  memcpy(&f, &bits, sizeof(f));
  return f;
}

static uint16_t float_to_half(float f)
{
  uint32_t x;
  memcpy(&x, &f, sizeof(x));
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
  int32_t exp = (int32_t)((x >> 23) & 0xff) - 112;
  uint32_t man = x & 0x7fffff;
  if (((x >> 23) & 0xff) == 0xff)
    return sign | 0x7c00 | (man ? 0x200 : 0);
  if (exp >= 0x1f)
    return sign | 0x7c00;
  if (exp <= 0) {
    if (exp < -10)
      return sign;
    man |= 0x800000;
    uint32_t shift = (uint32_t)(14 - exp);
    uint32_t half = man >> shift, rest = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
    if (rest > mid || (rest == mid && (half & 1)))
      half++;
    return sign | (uint16_t)half;
  }
  uint32_t h = ((uint32_t)exp << 10) | (man >> 13), rest = man & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1)))
    h++; /* may carry into the exponent, which is right */
  return sign | (uint16_t)h;
}

static float bf16_to_float(uint16_t b)
{
  uint32_t bits = (uint32_t)b << 16;
  float f;
  memcpy(&f, &bits, sizeof(f));
  return f;
}

static uint16_t float_to_bf16(float f)
{
  uint32_t x;
  memcpy(&x, &f, sizeof(x));
  if ((x & 0x7fffffff) > 0x7f800000)
    return (uint16_t)((x >> 16) | 0x40);
  x += 0x7fff + ((x >> 16) & 1);
  return (uint16_t)(x >> 16);
}

static union acc load(ncclDataType_t t, const void *base, size_t i)
{
  union acc a;
  const char *p = (const char *)base + i * type_bytes(t);
  switch (t) {
  case ncclInt8:
    a.i = *(const int8_t *)p;
    break;
  case ncclUint8:
    a.u = *(const uint8_t *)p;
    break;
  case ncclInt32: {
    int32_t v;
    memcpy(&v, p, 4);
    a.i = v;
  } break;
  case ncclUint32: {
    uint32_t v;
    memcpy(&v, p, 4);
    a.u = v;
  } break;
  case ncclInt64:
    memcpy(&a.i, p, 8);
    break;
  case ncclUint64:
    memcpy(&a.u, p, 8);
    break;
  case ncclFloat16: {
    uint16_t v;
    memcpy(&v, p, 2);
    a.f = half_to_float(v);
  } break;
  case ncclBfloat16: {
    uint16_t v;
    memcpy(&v, p, 2);
    a.f = bf16_to_float(v);
  } break;
  case ncclFloat32: {
    float v;
    memcpy(&v, p, 4);
    a.f = v;
  } break;
  default:
    memcpy(&a.f, p, 8);
    break;
  }
  return a;
}

static void store(ncclDataType_t t, void *base, size_t i, union acc a)
{
  char *p = (char *)base + i * type_bytes(t);
  switch (t) {
  case ncclInt8:
    *(int8_t *)p = (int8_t)a.i;
    break;
  case ncclUint8:
    *(uint8_t *)p = (uint8_t)a.u;
    break;
  case ncclInt32: {
    int32_t v = (int32_t)a.i;
    memcpy(p, &v, 4);
  } break;
  case ncclUint32: {
    uint32_t v = (uint32_t)a.u;
    memcpy(p, &v, 4);
  } break;
  case ncclInt64:
    memcpy(p, &a.i, 8);
    break;
  case ncclUint64:
    memcpy(p, &a.u, 8);
    break;
  case ncclFloat16: {
    uint16_t v = float_to_half((float)a.f);
    memcpy(p, &v, 2);
  } break;
  case ncclBfloat16: {
    uint16_t v = float_to_bf16((float)a.f);
    memcpy(p, &v, 2);
  } break;
  case ncclFloat32: {
    float v = (float)a.f;
    memcpy(p, &v, 4);
  } break;
  default:
    memcpy(p, &a.f, 8);
    break;
  }
}

static void combine(enum kind k, ncclRedOp_t op, union acc *a, union acc b)
{
  switch (op) {
  case ncclProd:
    if (k == KIND_FLOAT)
      a->f *= b.f;
    else if (k == KIND_INT)
      a->i *= b.i;
    else
      a->u *= b.u;
    break;
  case ncclMax:
    if (k == KIND_FLOAT)
      a->f = b.f > a->f ? b.f : a->f;
    else if (k == KIND_INT)
      a->i = b.i > a->i ? b.i : a->i;
    else
      a->u = b.u > a->u ? b.u : a->u;
    break;
  case ncclMin:
    if (k == KIND_FLOAT)
      a->f = b.f < a->f ? b.f : a->f;
    else if (k == KIND_INT)
      a->i = b.i < a->i ? b.i : a->i;
    else
      a->u = b.u < a->u ? b.u : a->u;
    break;
  default: /* Sum, Avg */
    if (k == KIND_FLOAT)
      a->f += b.f;
    else if (k == KIND_INT)
      a->i += b.i;
    else
      a->u += b.u;
  }
}

/* Whether [p, p + bytes) lies inside one allocation the simulated driver knows. */
static bool device_range(const void *p, size_t bytes)
{
  if (!p)
    return false;
  CUdeviceptr base = 0;
  size_t size = 0;
  fakegpu_internal_begin();
  CUresult r = cuMemGetAddressRange_v2(&base, &size, (CUdeviceptr)(uintptr_t)p);
  fakegpu_internal_end();
  uintptr_t a = (uintptr_t)p;
  return r == CUDA_SUCCESS && a >= base && bytes <= size - (a - base);
}

/* out[i] = op over ranks of in[r][offset + i], for n elements, into a scratch first (in place). */
static bool reduce_into(struct fgn_task **t, int nranks, size_t offset, size_t n, void **outs,
                        int nouts)
{
  ncclDataType_t type = t[0]->datatype;
  enum kind k = type_kind(type);
  size_t esz = type_bytes(type);
  if (k == KIND_NONE)
    return false;
  for (int r = 0; r < nranks; r++)
    if (!device_range((const char *)t[r]->sendbuff + offset * esz, n * esz))
      return false;
  for (int o = 0; o < nouts; o++)
    if (!device_range(outs[o], n * esz))
      return false;
  void *scratch = malloc(n > 0 ? n * esz : 1);
  if (!scratch)
    return false;
  for (size_t i = 0; i < n; i++) {
    union acc a = load(type, t[0]->sendbuff, offset + i);
    for (int r = 1; r < nranks; r++)
      combine(k, t[0]->op, &a, load(type, t[r]->sendbuff, offset + i));
    if (t[0]->op == ncclAvg) {
      if (k == KIND_FLOAT)
        a.f /= nranks;
      else if (k == KIND_INT)
        a.i /= nranks;
      else
        a.u /= (uint64_t)nranks;
    }
    store(type, scratch, i, a);
  }
  for (int o = 0; o < nouts; o++)
    memcpy(outs[o], scratch, n * esz);
  free(scratch);
  return true;
}

static bool copy(void *dst, const void *src, size_t bytes)
{
  if (!device_range(dst, bytes) || !device_range(src, bytes))
    return false;
  memmove(dst, src, bytes);
  return true;
}

/* One collective, the same call on every rank (t[r] is rank r's task). */
static void move_coll(struct fgn_task **t, int nranks)
{
  size_t count = t[0]->count;
  void *outs[64];
  switch (t[0]->func) {
  case FGN_FUNC_ALLREDUCE:
    for (int r = 0; r < nranks; r++)
      outs[r] = t[r]->recvbuff;
    reduce_into(t, nranks, 0, count, outs, nranks);
    break;
  case FGN_FUNC_REDUCE:
    outs[0] = t[t[0]->root]->recvbuff;
    reduce_into(t, nranks, 0, count, outs, 1);
    break;
  case FGN_FUNC_REDUCESCATTER:
    for (int r = 0; r < nranks; r++) {
      outs[0] = t[r]->recvbuff;
      reduce_into(t, nranks, (size_t)r * count, count, outs, 1);
    }
    break;
  case FGN_FUNC_BROADCAST: /* count is in bytes here (collTaskAppend) */
    for (int r = 0; r < nranks; r++)
      if (r != t[0]->root)
        copy(t[r]->recvbuff, t[t[0]->root]->sendbuff, count);
    copy(t[t[0]->root]->recvbuff, t[t[0]->root]->sendbuff, count);
    break;
  case FGN_FUNC_ALLGATHER: /* bytes per rank */
    for (int dst = 0; dst < nranks; dst++)
      for (int src = 0; src < nranks; src++)
        copy((char *)t[dst]->recvbuff + (size_t)src * count, t[src]->sendbuff, count);
    break;
  default:
    break;
  }
}

static bool same_call(const struct fgn_task *a, const struct fgn_task *b)
{
  return a->func == b->func && a->count == b->count && a->datatype == b->datatype &&
         a->op == b->op && a->root == b->root;
}

void fgn_move_data(struct ncclComm **members, int n)
{
  if (n < 1 || n > 64 || members[0]->nranks != n)
    return;
  struct ncclComm *by_rank[64] = {0};
  for (int i = 0; i < n; i++) {
    int r = members[i]->rank;
    if (r < 0 || r >= n || by_rank[r])
      return;
    by_rank[r] = members[i];
  }
  /* Collectives: the k-th call of every rank. */
  struct fgn_task *cur[64];
  for (int r = 0; r < n; r++)
    cur[r] = by_rank[r]->colls;
  for (;;) {
    bool all = true, match = true;
    for (int r = 0; r < n; r++) {
      all = all && cur[r];
      match = match && cur[r] && same_call(cur[0], cur[r]);
    }
    if (!all)
      break;
    if (match)
      move_coll(cur, n);
    for (int r = 0; r < n; r++)
      cur[r] = cur[r]->next;
  }
  /* p2p: each send pairs with the peer's first unmatched receive from this rank. */
  for (int src = 0; src < n; src++)
    for (struct fgn_task *s = by_rank[src]->p2ps; s; s = s->next) {
      if (s->func != FGN_FUNC_SEND || s->root < 0 || s->root >= n)
        continue;
      for (struct fgn_task *rcv = by_rank[s->root]->p2ps; rcv; rcv = rcv->next)
        if (rcv->func == FGN_FUNC_RECV && rcv->root == src && !rcv->matched) {
          rcv->matched = true;
          size_t sb = s->count * type_bytes(s->datatype);
          size_t rb = rcv->count * type_bytes(rcv->datatype);
          copy(rcv->recvbuff, s->recvbuff, sb < rb ? sb : rb);
          break;
        }
    }
}

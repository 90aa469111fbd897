/* Reads the GPU code images nvcc produces (fatbin wrapper, fatbin, cubin ELF, PTX text). */
#define _POSIX_C_SOURCE 200809L
#include "image.h"

#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <gelf.h>
#include <libelf.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/*
 * Layouts below were measured on files nvcc 13.0 writes (nvcc -fatbin / -cubin / -ptx and the
 * .nvFatBinSegment of host objects), all little-endian:
 *
 * wrapper (what the host stub hands __cudaRegisterFatBinary), 24 bytes:
 *   u32 magic 0x466243b1, u32 version (1), u64 pointer to the fatbin, u64 (NULL here)
 * fatbin header, 16 bytes:
 *   u32 magic 0xBA55ED50, u16 version (1), u16 header size (16), u64 size of the entries
 * entry header (0x40 for ELF, 0x50 for PTX; the payload follows it):
 *   +0x00 u16 kind (1 PTX, 2 ELF)      +0x04 u32 header size   +0x08 u64 payload size (padded)
 *   +0x10 u32 compressed size (0 if not compressed)            +0x1c u32 arch (75, 90, ...)
 *   +0x28 u64 flags                    +0x38 u64 uncompressed size (0 if not compressed)
 * flags: 0x01 64-bit, 0x10 Linux host, 0x2000 LZ4 block, 0x8000 zstd frame. nvcc 13.0 compresses
 * PTX entries with zstd by default (--compress-mode=default/balance/size), with LZ4 for
 * --compress-mode=speed; ELF entries only with --compress-mode=size or -Xfatbin -compress-all.
 */
#define FATBIN_WRAPPER_MAGIC 0x466243b1u
#define FATBIN_MAGIC 0xBA55ED50u
#define FATBIN_KIND_PTX 1
#define FATBIN_KIND_ELF 2
#define FATBIN_FLAG_LZ4 0x2000u
#define FATBIN_FLAG_ZSTD 0x8000u
#define FATBIN_ENTRY_MIN_HEADER 0x40u

/* An entry bigger than this is taken for corruption rather than allocated. */
#define IMAGE_MAX_ENTRY (1ull << 31)

/* CUDA ELF facts (from readelf on nvcc's cubins): EM_CUDA, kernel entries carry this bit in
 * st_other, .nv.info records are {u8 format, u8 attribute, payload}. */
#define FG_EM_CUDA 190
#define STO_CUDA_ENTRY 0x10
#define EIFMT_SVAL 4            /* u16 length, then that many bytes */
#define EIATTR_MAX_THREADS 0x05 /* per kernel: u32 x, y, z of __launch_bounds__ */
#define EIATTR_REGCOUNT 0x2f    /* global .nv.info: u32 symbol index, u32 registers */
/* sm_90 cubins whose kernels use shared memory reserve 1 KiB at its start (the undefined symbol
 * .nv.reservedSmem.offset0 says so) and count it in .nv.shared.<name>; the CUDA API reports
 * that reservation apart from a kernel's static shared memory, so it is taken off. */
#define RESERVED_SMEM_SYMBOL ".nv.reservedSmem.offset0"
#define RESERVED_SMEM_BYTES 1024

struct name_set {
  char **slots;
  size_t cap; /* power of two */
  size_t count;
};

struct walk {
  fg_image_fn fn;
  void *arg;
  struct name_set seen;
  int reported;
  int stopped;
};

static uint16_t rd16(const unsigned char *p)
{
  uint16_t v;
  memcpy(&v, p, sizeof(v));
  return v;
}

static uint32_t rd32(const unsigned char *p)
{
  uint32_t v;
  memcpy(&v, p, sizeof(v));
  return v;
}

static uint64_t rd64(const unsigned char *p)
{
  uint64_t v;
  memcpy(&v, p, sizeof(v));
  return v;
}

static size_t hash_name(const char *s)
{
  size_t h = 1469598103934665603ull;
  for (; *s; s++)
    h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

/* Adds `name`; 1 if it was new, 0 if seen before, -ENOMEM. */
static int name_set_add(struct name_set *set, const char *name)
{
  if ((set->count + 1) * 2 > set->cap) {
    size_t cap = set->cap ? set->cap * 2 : 64;
    char **slots = calloc(cap, sizeof(*slots));
    if (!slots)
      return -ENOMEM;
    for (size_t i = 0; i < set->cap; i++) {
      if (!set->slots[i])
        continue;
      size_t j = hash_name(set->slots[i]) & (cap - 1);
      while (slots[j])
        j = (j + 1) & (cap - 1);
      slots[j] = set->slots[i];
    }
    free(set->slots);
    set->slots = slots;
    set->cap = cap;
  }
  size_t j = hash_name(name) & (set->cap - 1);
  while (set->slots[j]) {
    if (strcmp(set->slots[j], name) == 0)
      return 0;
    j = (j + 1) & (set->cap - 1);
  }
  set->slots[j] = strdup(name);
  if (!set->slots[j])
    return -ENOMEM;
  set->count++;
  return 1;
}

static void name_set_free(struct name_set *set)
{
  for (size_t i = 0; i < set->cap; i++)
    free(set->slots[i]);
  free(set->slots);
}

/* Hands one entry to the caller unless an earlier architecture already did. */
static int report(struct walk *w, const struct fg_image_function *f)
{
  if (w->stopped)
    return 0;
  int added = name_set_add(&w->seen, f->name);
  if (added <= 0)
    return added;
  w->reported++;
  if (w->fn && w->fn(f, w->arg))
    w->stopped = 1;
  return 0;
}

/* ---- PTX ---- */

static int ptx_ident_char(int c)
{
  return isalnum(c) || c == '_' || c == '$' || c == '%' || c == '.';
}

/* Skips whitespace and comments; PTX has C++-style comments and no string literals that could
 * hold ".entry" outside .file directives, which never sit between tokens we look at. */
static size_t ptx_skip_space(const char *t, size_t i, size_t len)
{
  while (i < len) {
    if (isspace((unsigned char)t[i])) {
      i++;
    } else if (t[i] == '/' && i + 1 < len && t[i + 1] == '/') {
      while (i < len && t[i] != '\n')
        i++;
    } else if (t[i] == '/' && i + 1 < len && t[i + 1] == '*') {
      i += 2;
      while (i + 1 < len && !(t[i] == '*' && t[i + 1] == '/'))
        i++;
      i = i + 2 < len ? i + 2 : len;
    } else {
      break;
    }
  }
  return i;
}

/* Reads `.maxntid x, y, z` (or .reqntid) between the parameter list and the body. */
static int ptx_max_threads(const char *t, size_t i, size_t len)
{
  int depth = 0;
  for (; i < len; i++) {
    if (t[i] == '(')
      depth++;
    else if (t[i] == ')')
      depth--;
    else if (t[i] == '{' || t[i] == ';')
      return 0;
    else if (depth == 0 && t[i] == '.' &&
             (strncmp(t + i, ".maxntid", 8) == 0 || strncmp(t + i, ".reqntid", 8) == 0)) {
      long n = 1;
      char *end = (char *)t + i + 8;
      for (int d = 0; d < 3; d++) {
        const char *p = end;
        while (p < t + len && (isspace((unsigned char)*p) || *p == ','))
          p++;
        if (p >= t + len || !isdigit((unsigned char)*p))
          break;
        n *= strtol(p, &end, 10);
      }
      return n > 0 && n <= 1 << 20 ? (int)n : 0;
    }
  }
  return 0;
}

static int read_ptx(struct walk *w, const char *t, size_t len)
{
  char name[1024];
  size_t i = 0;
  while (i < len && !w->stopped) {
    i = ptx_skip_space(t, i, len);
    if (i >= len)
      break;
    if (!ptx_ident_char((unsigned char)t[i])) {
      i++;
      continue;
    }
    size_t start = i;
    while (i < len && ptx_ident_char((unsigned char)t[i]))
      i++;
    if (i - start != 6 || memcmp(t + start, ".entry", 6) != 0)
      continue;
    i = ptx_skip_space(t, i, len);
    size_t n = 0;
    while (i < len && ptx_ident_char((unsigned char)t[i]) && n + 1 < sizeof(name))
      name[n++] = t[i++];
    name[n] = '\0';
    if (n == 0)
      continue;
    struct fg_image_function f = {.name = name, .max_threads = ptx_max_threads(t, i, len)};
    int err = report(w, &f);
    if (err < 0)
      return err;
  }
  return 0;
}

/* NUL-terminated text whose start looks like PTX (a directive or comment after whitespace). */
static int looks_like_ptx(const char *t)
{
  size_t i = 0;
  while (t[i] && isspace((unsigned char)t[i]) && i < 4096)
    i++;
  return t[i] == '.' || (t[i] == '/' && (t[i + 1] == '/' || t[i + 1] == '*'));
}

/* ---- cubin (ELF) ---- */

/* An ELF image passed without its size: the end of its furthest header table or section. */
static size_t elf_extent(const unsigned char *p)
{
  Elf64_Ehdr eh;
  memcpy(&eh, p, sizeof(eh));
  size_t end = sizeof(eh);
  if (eh.e_shoff && eh.e_shoff + (size_t)eh.e_shnum * eh.e_shentsize > end)
    end = eh.e_shoff + (size_t)eh.e_shnum * eh.e_shentsize;
  if (eh.e_phoff && eh.e_phoff + (size_t)eh.e_phnum * eh.e_phentsize > end)
    end = eh.e_phoff + (size_t)eh.e_phnum * eh.e_phentsize;
  if (eh.e_shentsize != sizeof(Elf64_Shdr))
    return end;
  for (unsigned s = 0; s < eh.e_shnum; s++) {
    Elf64_Shdr sh;
    memcpy(&sh, p + eh.e_shoff + (size_t)s * sizeof(sh), sizeof(sh));
    if (sh.sh_type != SHT_NOBITS && sh.sh_offset + sh.sh_size > end)
      end = sh.sh_offset + sh.sh_size;
  }
  return end;
}

/* Walks the records of one .nv.info section. */
static void nv_info_scan(Elf_Data *d, int *regs, size_t nsyms, int *max_threads)
{
  const unsigned char *p = d->d_buf;
  size_t len = d->d_size, i = 0;
  while (i + 4 <= len) {
    unsigned fmt = p[i], attr = p[i + 1];
    size_t size = fmt == EIFMT_SVAL ? rd16(p + i + 2) : 0;
    const unsigned char *val = p + i + 4;
    if (i + 4 + size > len)
      break;
    if (fmt == EIFMT_SVAL && attr == EIATTR_REGCOUNT && size >= 8 && regs) {
      uint32_t sym = rd32(val);
      if (sym < nsyms)
        regs[sym] = (int)rd32(val + 4);
    } else if (fmt == EIFMT_SVAL && attr == EIATTR_MAX_THREADS && size >= 12 && max_threads) {
      uint64_t n = (uint64_t)rd32(val) * rd32(val + 4) * rd32(val + 8);
      *max_threads = n <= 1 << 20 ? (int)n : 0;
    }
    i += 4 + size;
  }
}

static int read_cubin_elf(struct walk *w, Elf *elf)
{
  size_t shstrndx, nsecs;
  GElf_Ehdr eh;
  if (!gelf_getehdr(elf, &eh) || eh.e_machine != FG_EM_CUDA || eh.e_ident[EI_CLASS] != ELFCLASS64)
    return -EINVAL;
  if (elf_getshdrstrndx(elf, &shstrndx) || elf_getshdrnum(elf, &nsecs))
    return -EINVAL;

  Elf_Scn *symscn = NULL;
  GElf_Shdr symsh;
  for (Elf_Scn *s = elf_nextscn(elf, NULL); s; s = elf_nextscn(elf, s)) {
    GElf_Shdr sh;
    if (gelf_getshdr(s, &sh) && sh.sh_type == SHT_SYMTAB) {
      symscn = s;
      symsh = sh;
      break;
    }
  }
  if (!symscn)
    return 0; /* no symbols, no kernels (a data-only cubin) */
  Elf_Data *syms = elf_getdata(symscn, NULL);
  if (!syms || !symsh.sh_entsize)
    return -EINVAL;
  size_t nsyms = symsh.sh_size / symsh.sh_entsize;

  int err = 0;
  int *regs = calloc(nsyms ? nsyms : 1, sizeof(*regs));
  int *sec_threads = calloc(nsecs ? nsecs : 1, sizeof(*sec_threads));
  int *sec_smem = calloc(nsecs ? nsecs : 1, sizeof(*sec_smem));
  if (!regs || !sec_threads || !sec_smem) {
    err = -ENOMEM;
    goto out;
  }

  int reserved_smem = 0;
  for (size_t i = 0; i < nsyms; i++) {
    GElf_Sym sym;
    const char *n;
    if (gelf_getsym(syms, (int)i, &sym) && sym.st_shndx == SHN_UNDEF &&
        (n = elf_strptr(elf, symsh.sh_link, sym.st_name)) && strcmp(n, RESERVED_SMEM_SYMBOL) == 0)
      reserved_smem = RESERVED_SMEM_BYTES;
  }

  /* Per-kernel sections point at their kernel's .text section through sh_info. */
  for (Elf_Scn *s = elf_nextscn(elf, NULL); s; s = elf_nextscn(elf, s)) {
    GElf_Shdr sh;
    const char *n;
    if (!gelf_getshdr(s, &sh) || !(n = elf_strptr(elf, shstrndx, sh.sh_name)))
      continue;
    if (strcmp(n, ".nv.info") == 0) {
      Elf_Data *d = elf_getdata(s, NULL);
      if (d && d->d_buf)
        nv_info_scan(d, regs, nsyms, NULL);
    } else if (strncmp(n, ".nv.info.", 9) == 0 && sh.sh_info < nsecs) {
      Elf_Data *d = elf_getdata(s, NULL);
      if (d && d->d_buf)
        nv_info_scan(d, NULL, 0, &sec_threads[sh.sh_info]);
    } else if (strncmp(n, ".nv.shared.", 11) == 0 && sh.sh_info < nsecs && sh.sh_info != 0) {
      long smem = (long)sh.sh_size - reserved_smem;
      sec_smem[sh.sh_info] = smem > 0 && smem < 1 << 30 ? (int)smem : 0;
    }
  }

  for (size_t i = 0; i < nsyms && !w->stopped; i++) {
    GElf_Sym sym;
    GElf_Shdr sh;
    const char *name, *secname;
    if (!gelf_getsym(syms, (int)i, &sym) || GELF_ST_TYPE(sym.st_info) != STT_FUNC ||
        !(sym.st_other & STO_CUDA_ENTRY) || sym.st_shndx == SHN_UNDEF || sym.st_shndx >= nsecs)
      continue;
    name = elf_strptr(elf, symsh.sh_link, sym.st_name);
    Elf_Scn *text = elf_getscn(elf, sym.st_shndx);
    if (!name || !text || !gelf_getshdr(text, &sh) ||
        !(secname = elf_strptr(elf, shstrndx, sh.sh_name)))
      continue;
    /* A kernel owns the section .text.<its name>; device functions share it or have their own
     * section without the entry bit. */
    if (strncmp(secname, ".text.", 6) != 0 || strcmp(secname + 6, name) != 0)
      continue;
    struct fg_image_function f = {
        .name = name,
        .num_regs = regs[i],
        .static_smem = sec_smem[sym.st_shndx],
        .max_threads = sec_threads[sym.st_shndx],
    };
    err = report(w, &f);
    if (err < 0)
      goto out;
  }
out:
  free(regs);
  free(sec_threads);
  free(sec_smem);
  return err;
}

static int read_cubin(struct walk *w, const unsigned char *p, size_t len)
{
  if (elf_version(EV_CURRENT) == EV_NONE)
    return -ENOTSUP;
  if (len < sizeof(Elf64_Ehdr) || p[EI_CLASS] != ELFCLASS64 || p[EI_DATA] != ELFDATA2LSB)
    return -EINVAL;
  /* libelf reads the image in place only when aligned and may write to it; a private copy
   * keeps read-only .nv_fatbin sections and caller buffers untouched. */
  char *copy = malloc(len);
  if (!copy)
    return -ENOMEM;
  memcpy(copy, p, len);
  int err = -EINVAL;
  Elf *elf = elf_memory(copy, len);
  if (elf) {
    err = elf_kind(elf) == ELF_K_ELF ? read_cubin_elf(w, elf) : -EINVAL;
    elf_end(elf);
  }
  free(copy);
  return err;
}

/* ---- fatbin ---- */

/*
 * The decompressors are Debian's liblz4 and libzstd, loaded when first needed rather than
 * linked: whoever builds the simulated driver then needs only libelf, and a machine without
 * them reads uncompressed images and answers -ENOTSUP for the rest. The prototypes are the
 * libraries' stable ABI (LZ4_decompress_safe, ZSTD_decompress, ZSTD_isError).
 */
typedef int (*lz4_decompress_fn)(const char *src, char *dst, int src_size, int dst_cap);
typedef size_t (*zstd_decompress_fn)(void *dst, size_t dst_cap, const void *src, size_t src_size);
typedef unsigned (*zstd_is_error_fn)(size_t code);

static struct {
  pthread_once_t once;
  lz4_decompress_fn lz4_decompress;
  zstd_decompress_fn zstd_decompress;
  zstd_is_error_fn zstd_is_error;
} codecs = {.once = PTHREAD_ONCE_INIT};

static void codecs_load(void)
{
  void *lz4 = dlopen("liblz4.so.1", RTLD_NOW | RTLD_LOCAL);
  void *zstd = dlopen("libzstd.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lz4)
    *(void **)&codecs.lz4_decompress = dlsym(lz4, "LZ4_decompress_safe");
  if (zstd) {
    *(void **)&codecs.zstd_decompress = dlsym(zstd, "ZSTD_decompress");
    *(void **)&codecs.zstd_is_error = dlsym(zstd, "ZSTD_isError");
  }
}

/* Returns the uncompressed payload of an entry in *out (malloc'd, *owned = 1) or the payload
 * in place. */
static int entry_payload(const unsigned char *e, const unsigned char **out, size_t *out_len,
                         int *owned)
{
  uint32_t hdr = rd32(e + 4);
  uint64_t size = rd64(e + 8), flags = rd64(e + 0x28);
  uint32_t csize = rd32(e + 0x10);
  uint64_t usize = rd64(e + 0x38);
  const unsigned char *src = e + hdr;
  *owned = 0;
  if (!(flags & (FATBIN_FLAG_LZ4 | FATBIN_FLAG_ZSTD))) {
    if (csize != 0)
      return -ENOTSUP; /* compressed with a method nvcc 13.0 never used here */
    *out = src;
    *out_len = size;
    return 0;
  }
  if (csize == 0 || csize > size)
    csize = (uint32_t)size;
  if (usize == 0 || usize > IMAGE_MAX_ENTRY)
    return -EINVAL;
  unsigned char *dst = malloc(usize + 1);
  if (!dst)
    return -ENOMEM;
  int err = -ENOTSUP;
  pthread_once(&codecs.once, codecs_load);
  if ((flags & FATBIN_FLAG_LZ4) && codecs.lz4_decompress && usize <= INT32_MAX) {
    int n = codecs.lz4_decompress((const char *)src, (char *)dst, (int)csize, (int)usize);
    err = n == (int)usize ? 0 : -EINVAL;
  } else if ((flags & FATBIN_FLAG_ZSTD) && codecs.zstd_decompress && codecs.zstd_is_error) {
    size_t n = codecs.zstd_decompress(dst, usize, src, csize);
    err = !codecs.zstd_is_error(n) && n == usize ? 0 : -EINVAL;
  }
  if (err) {
    free(dst);
    return err;
  }
  dst[usize] = '\0';
  *out = dst;
  *out_len = usize;
  *owned = 1;
  return 0;
}

static int read_fatbin(struct walk *w, const unsigned char *p)
{
  uint16_t hdr = rd16(p + 6);
  uint64_t total = rd64(p + 8);
  if (hdr < 16 || total > IMAGE_MAX_ENTRY)
    return -EINVAL;
  const unsigned char *begin = p + hdr, *end = begin + total;
  int readable = 0, unsupported = 0;

  /* Two passes: cubins first so that register counts win over the PTX of the same kernel. */
  for (int pass = 0; pass < 2 && !w->stopped; pass++) {
    int want = pass == 0 ? FATBIN_KIND_ELF : FATBIN_KIND_PTX;
    for (const unsigned char *e = begin; e + FATBIN_ENTRY_MIN_HEADER <= end && !w->stopped;) {
      uint32_t ehdr = rd32(e + 4);
      uint64_t size = rd64(e + 8);
      if (ehdr < FATBIN_ENTRY_MIN_HEADER || ehdr > (size_t)(end - e) ||
          size > (uint64_t)(end - e) - ehdr)
        return -EINVAL;
      if (rd16(e) == want) {
        const unsigned char *body;
        size_t len;
        int owned;
        int err = entry_payload(e, &body, &len, &owned);
        if (err == -ENOTSUP) {
          unsupported++;
        } else if (err) {
          return err;
        } else {
          if (want == FATBIN_KIND_ELF)
            err = read_cubin(w, body, len);
          else
            err = read_ptx(w, (const char *)body, strnlen((const char *)body, len));
          if (owned)
            free((void *)body);
          if (err)
            return err;
          readable++;
        }
      }
      e += ehdr + size;
    }
  }
  /* An unreadable entry matters only when nothing else described the kernels: the cubins and
   * PTX of one fatbin define the same entries for different architectures. */
  return readable == 0 && unsupported ? -ENOTSUP : 0;
}

int fg_image_functions(const void *image, fg_image_fn fn, void *arg)
{
  const unsigned char *p = image;
  struct walk w = {.fn = fn, .arg = arg};
  int err;
  if (!p)
    return -EINVAL;
  uint32_t magic = rd32(p);
  if (magic == FATBIN_WRAPPER_MAGIC) {
    const unsigned char *fb;
    memcpy(&fb, p + 8, sizeof(fb));
    if (!fb || rd32(fb) != FATBIN_MAGIC)
      return -EINVAL;
    err = read_fatbin(&w, fb);
  } else if (magic == FATBIN_MAGIC) {
    err = read_fatbin(&w, p);
  } else if (memcmp(p, ELFMAG, SELFMAG) == 0) {
    err = p[EI_CLASS] == ELFCLASS64 ? read_cubin(&w, p, elf_extent(p)) : -EINVAL;
  } else if (looks_like_ptx(image)) {
    err = read_ptx(&w, image, strlen(image));
  } else {
    err = -EINVAL;
  }
  name_set_free(&w.seen);
  return err < 0 ? err : w.reported;
}

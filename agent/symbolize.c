/* Symbolization of captured frames: module map, ELF symbol tables, demangling, Python frames. */
#define LOG_MODULE "stacks"
#include "agent/symbolize.h"

#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <limits.h>
#include <link.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/pystack.h"
#include "agent/stack.h"
#include "agent/util/demangle.h"
#include "agent/util/log.h"

struct sym {
  uint64_t addr, size; /* link-time address */
  char *name;
  char *demangled; /* lazily; NULL until asked */
};

struct module {
  struct sym_module m;
  int loaded;    /* symbols read (or tried) */
  uint64_t seen; /* the last reading of the map that found it loaded */
  struct sym *syms;
  size_t n_syms;
};

struct symbolizer {
  struct module *mods;
  size_t n_mods, cap_mods;
  struct sym_module *views;      /* the public copy for symbolizer_modules */
  struct demangle_cache *dm;     /* kernel names (symbolizer_demangle) */
  unsigned long long adds, subs; /* the loader's dlopen/dlclose counters at the last read */
  uint64_t gen;                  /* readings of the map so far */
};

/* ---- demangling ---- */

const char *symbolizer_demangle(struct symbolizer *s, const char *name)
{
  /* Created on first use: most symbolizers resolve frames only. Without one (out of memory)
   * demangle_cache_get returns the name as given. */
  if (!s->dm)
    s->dm = demangle_cache_new(0);
  return demangle_cache_get(s->dm, name);
}

/* ---- the module map ---- */

static void read_build_id(const struct dl_phdr_info *info, struct sym_module *m)
{
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    const char *p, *end;

    if (ph->p_type != PT_NOTE)
      continue;
    p = (const char *)(info->dlpi_addr + ph->p_vaddr);
    end = p + ph->p_memsz;
    while (p + sizeof(ElfW(Nhdr)) <= end) {
      const ElfW(Nhdr) *nh = (const ElfW(Nhdr) *)p;
      const char *name = p + sizeof(*nh);
      const char *desc = name + ((nh->n_namesz + 3) & ~3u);
      if (desc + nh->n_descsz > end)
        break;
      if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 && !memcmp(name, "GNU", 4) &&
          nh->n_descsz <= sizeof(m->build_id)) {
        memcpy(m->build_id, desc, nh->n_descsz);
        m->build_id_len = nh->n_descsz;
        return;
      }
      p = desc + ((nh->n_descsz + 3) & ~3u);
    }
  }
}

/*
 * The file mapped at addr, from /proc/self/maps. The main program's file: /proc/self/exe names
 * the loader instead when the program was started through it (`ld-linux-x86-64.so.2 ./prog`),
 * and its symbols would then be read from the loader's file.
 */
static int mapped_file(uint64_t addr, char *buf, size_t len)
{
  FILE *f = fopen("/proc/self/maps", "re");
  char line[PATH_MAX + 128];
  int ret = -ENOENT;

  if (!f)
    return -errno;
  while (fgets(line, sizeof(line), f)) {
    unsigned long long lo, hi;
    int off = 0;
    size_t n;

    if (sscanf(line, "%llx-%llx %*s %*s %*s %*s %n", &lo, &hi, &off) < 2 || !off || addr < lo ||
        addr >= hi)
      continue;
    n = strcspn(line + off, "\n");
    if (line[off] == '/' && n < len) {
      memcpy(buf, line + off, n);
      buf[n] = '\0';
      ret = 0;
    }
    break;
  }
  fclose(f);
  return ret;
}

static int on_module(struct dl_phdr_info *info, size_t size, void *data)
{
  struct symbolizer *s = data;
  char exe[PATH_MAX];
  const char *path = info->dlpi_name;
  struct sym_module m;
  int have = 0;

  (void)size;
  memset(&m, 0, sizeof(m));
  m.bias = info->dlpi_addr;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    uint64_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
    if (ph->p_type != PT_LOAD)
      continue;
    if (!have || lo < m.lo)
      m.lo = lo;
    if (!have || hi > m.hi)
      m.hi = hi;
    if (ph->p_flags & PF_X)
      m.file_offset = ph->p_offset;
    have = 1;
  }
  if (!have)
    return 0;
  read_build_id(info, &m);
  /* Known already, unless another file now occupies the range (the first one was dlclosed):
   * then the new module is appended. The same path at the same addresses is not enough: a
   * rebuilt library (a JIT extension built again, a reused temporary name) is loaded there
   * too, so the build id must match as well. */
  for (size_t i = 0; i < s->n_mods; i++)
    if (s->mods[i].m.lo == m.lo && s->mods[i].m.hi == m.hi &&
        (!path || !path[0] || !strcmp(s->mods[i].m.path, path)) &&
        s->mods[i].m.build_id_len == m.build_id_len &&
        !memcmp(s->mods[i].m.build_id, m.build_id, m.build_id_len)) {
      s->mods[i].seen = s->gen;
      return 0;
    }
  if (!path || !path[0]) {
    /* The main program (dl_iterate_phdr names it ""), or the vDSO (no file). */
    ssize_t n;
    if (s->n_mods > 0)
      return 0;
    if (mapped_file(m.lo, exe, sizeof(exe)) != 0) {
      if ((n = readlink("/proc/self/exe", exe, sizeof(exe) - 1)) <= 0)
        return 0;
      exe[n] = '\0';
    }
    path = exe;
  }
  if (s->n_mods == s->cap_mods) {
    size_t cap = s->cap_mods ? s->cap_mods * 2 : 32;
    struct module *mods = realloc(s->mods, cap * sizeof(*mods));
    if (!mods)
      return 1;
    s->mods = mods;
    s->cap_mods = cap;
  }
  m.path = strdup(path);
  m.name = m.path ? strdup(strrchr(m.path, '/') ? strrchr(m.path, '/') + 1 : m.path) : NULL;
  if (!m.path || !m.name) {
    free(m.path);
    free(m.name);
    return 1;
  }
  memset(&s->mods[s->n_mods], 0, sizeof(s->mods[0]));
  s->mods[s->n_mods].seen = s->gen;
  s->mods[s->n_mods++].m = m;
  return 0;
}

/* The loader's counters of objects loaded and unloaded so far (the first object's info). */
static int read_counters(struct dl_phdr_info *info, size_t size, void *data)
{
  unsigned long long *c = data;

  if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof(info->dlpi_subs)) {
    c[0] = info->dlpi_adds;
    c[1] = info->dlpi_subs;
  }
  return 1;
}

static void refresh_modules(struct symbolizer *s)
{
  unsigned long long c[2] = {0, 0};

  dl_iterate_phdr(read_counters, c);
  s->adds = c[0];
  s->subs = c[1];
  s->gen++;
  dl_iterate_phdr(on_module, s);
}

/*
 * A module loaded at the last reading of the map first: after a dlclose, the library loaded
 * at the same addresses is the one there now (also one known from before, loaded again after
 * the one that replaced it was closed). Then the closed ones, newest first, for frames that
 * were captured while they were loaded.
 */
static struct module *find_module(struct symbolizer *s, uint64_t addr)
{
  for (size_t i = s->n_mods; i-- > 0;)
    if (s->mods[i].seen == s->gen && addr >= s->mods[i].m.lo && addr < s->mods[i].m.hi)
      return &s->mods[i];
  for (size_t i = s->n_mods; i-- > 0;)
    if (addr >= s->mods[i].m.lo && addr < s->mods[i].m.hi)
      return &s->mods[i];
  return NULL;
}

int symbolizer_sync(struct symbolizer *s)
{
  unsigned long long c[2] = {0, 0};

  dl_iterate_phdr(read_counters, c);
  /* Counters of 0: a loader without them, where any change may have happened. */
  if (c[0] && c[0] == s->adds && c[1] == s->subs)
    return 0;
  refresh_modules(s);
  return 1;
}

/* ---- ELF symbols ---- */

static int cmp_sym(const void *a, const void *b)
{
  const struct sym *x = a, *y = b;

  if (x->addr != y->addr)
    return x->addr < y->addr ? -1 : 1;
  /* Same address: sized symbols first, then global names before local aliases (by length). */
  if (x->size != y->size)
    return x->size > y->size ? -1 : 1;
  return strcmp(x->name, y->name);
}

/* 1 if the file's NT_GNU_BUILD_ID note is the module's (or the module has none to compare). */
static int same_build_id(Elf *elf, const struct sym_module *m)
{
  Elf_Scn *scn = NULL;

  if (!m->build_id_len)
    return 1;
  while ((scn = elf_nextscn(elf, scn)) != NULL) {
    GElf_Shdr sh;
    GElf_Nhdr nh;
    Elf_Data *data;
    size_t off = 0, name_off, desc_off;

    if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_NOTE || !(data = elf_getdata(scn, NULL)))
      continue;
    while ((off = gelf_getnote(data, off, &nh, &name_off, &desc_off)) > 0)
      if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == 4 &&
          !memcmp((const char *)data->d_buf + name_off, "GNU", 4))
        return nh.n_descsz == m->build_id_len &&
               !memcmp((const char *)data->d_buf + desc_off, m->build_id, m->build_id_len);
  }
  return 0;
}

/*
 * Appends the functions of every SHT_SYMTAB/SHT_DYNSYM section; returns how many symtabs.
 * A file that is not the one loaded (rebuilt or replaced on disk since: its build id differs)
 * is not read: its names would be wrong for the loaded code.
 */
static int read_symbols(struct module *mod, const char *path)
{
  Elf *elf;
  Elf_Scn *scn = NULL;
  int fd, symtabs = 0;

  fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return -errno;
  elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
  if (!elf) {
    close(fd);
    return -EINVAL;
  }
  if (!same_build_id(elf, &mod->m)) {
    log_info("%s changed on disk since it was loaded (another build id): its frames are shown as "
             "module+offset",
             path);
    goto out;
  }
  while ((scn = elf_nextscn(elf, scn)) != NULL) {
    GElf_Shdr sh;
    Elf_Data *data;
    size_t n;

    if (!gelf_getshdr(scn, &sh) || (sh.sh_type != SHT_SYMTAB && sh.sh_type != SHT_DYNSYM) ||
        !sh.sh_entsize)
      continue;
    if (sh.sh_type == SHT_SYMTAB)
      symtabs++;
    data = elf_getdata(scn, NULL);
    if (!data)
      continue;
    n = sh.sh_size / sh.sh_entsize;
    for (size_t i = 0; i < n; i++) {
      GElf_Sym sym;
      const char *name;
      int type;

      if (!gelf_getsym(data, (int)i, &sym))
        continue;
      type = GELF_ST_TYPE(sym.st_info);
      if ((type != STT_FUNC && type != STT_GNU_IFUNC) || sym.st_shndx == SHN_UNDEF || !sym.st_value)
        continue;
      name = elf_strptr(elf, sh.sh_link, sym.st_name);
      if (!name || !name[0])
        continue;
      if (mod->n_syms % 1024 == 0) {
        struct sym *p = realloc(mod->syms, (mod->n_syms + 1024) * sizeof(*p));
        if (!p)
          goto out;
        mod->syms = p;
      }
      mod->syms[mod->n_syms].name = strdup(name);
      if (!mod->syms[mod->n_syms].name)
        goto out;
      mod->syms[mod->n_syms].addr = sym.st_value;
      mod->syms[mod->n_syms].size = sym.st_size;
      mod->syms[mod->n_syms].demangled = NULL;
      mod->n_syms++;
    }
  }
out:
  elf_end(elf);
  close(fd);
  return symtabs;
}

static void load_symbols(struct module *mod)
{
  size_t out = 0;

  mod->loaded = 1;
  if (read_symbols(mod, mod->m.path) == 0 && mod->m.build_id_len) {
    /* Stripped: Debian's -dbgsym packages put the full table under the build id. */
    char dbg[PATH_MAX];
    int len = snprintf(dbg, sizeof(dbg), "/usr/lib/debug/.build-id/%02x/", mod->m.build_id[0]);
    for (size_t i = 1; i < mod->m.build_id_len && len < (int)sizeof(dbg) - 8; i++)
      len += snprintf(dbg + len, sizeof(dbg) - (size_t)len, "%02x", mod->m.build_id[i]);
    snprintf(dbg + len, sizeof(dbg) - (size_t)len, ".debug");
    if (access(dbg, R_OK) == 0)
      read_symbols(mod, dbg);
  }
  if (!mod->n_syms)
    return;
  qsort(mod->syms, mod->n_syms, sizeof(*mod->syms), cmp_sym);
  /* One symbol per address (the sized one sorts first). */
  for (size_t i = 0; i < mod->n_syms; i++) {
    if (out && mod->syms[out - 1].addr == mod->syms[i].addr) {
      free(mod->syms[i].name);
      continue;
    }
    mod->syms[out++] = mod->syms[i];
  }
  mod->n_syms = out;
  log_debug("%zu functions in %s", out, mod->m.path);
}

static struct sym *find_sym(struct module *mod, uint64_t addr)
{
  size_t lo = 0, hi = mod->n_syms;
  struct sym *s;

  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (mod->syms[mid].addr <= addr)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo == 0)
    return NULL;
  s = &mod->syms[lo - 1];
  return !s->size || addr < s->addr + s->size ? s : NULL;
}

/* ---- the API ---- */

struct symbolizer *symbolizer_new(void)
{
  struct symbolizer *s = calloc(1, sizeof(*s));

  if (!s)
    return NULL;
  elf_version(EV_CURRENT);
  refresh_modules(s);
  return s;
}

void symbolizer_free(struct symbolizer *s)
{
  if (!s)
    return;
  for (size_t i = 0; i < s->n_mods; i++) {
    for (size_t j = 0; j < s->mods[i].n_syms; j++) {
      free(s->mods[i].syms[j].name);
      free(s->mods[i].syms[j].demangled);
    }
    free(s->mods[i].syms);
    free(s->mods[i].m.path);
    free(s->mods[i].m.name);
  }
  demangle_cache_free(s->dm);
  free(s->mods);
  free(s->views);
  free(s);
}

int symbolizer_resolve(struct symbolizer *s, uint64_t frame, struct sym_frame *out)
{
  struct module *mod;
  struct sym *sym;
  uint64_t addr;

  memset(out, 0, sizeof(*out));
  if (frame & STACK_FRAME_PYTHON) {
    out->python = 1;
    return pystack_resolve(frame, &out->function, &out->file, &out->line);
  }
  /* Outside every known module: read the map again only if the loader changed it since. A
   * frame in JIT code or anonymous memory is in no module, and reading the map (a pass over
   * every module, each checked against the known ones) for each such frame made resolving
   * them cost time quadratic in the number of modules. */
  mod = find_module(s, frame);
  if (!mod && symbolizer_sync(s))
    mod = find_module(s, frame);
  if (!mod)
    return -ENOENT;
  out->module = mod->m.name;
  out->module_path = mod->m.path;
  out->module_offset = frame - mod->m.bias;
  out->mod = &mod->m;
  if (!mod->loaded)
    load_symbols(mod);
  /* Frames are return addresses: the call is the instruction before. */
  addr = frame - mod->m.bias - 1;
  sym = find_sym(mod, addr);
  if (!sym)
    return -ENOENT;
  if (!sym->demangled)
    sym->demangled = demangle_alloc(sym->name);
  out->function = sym->demangled ? sym->demangled : sym->name;
  return 0;
}

const struct sym_module *symbolizer_modules(struct symbolizer *s, size_t *count)
{
  struct sym_module *v = realloc(s->views, (s->n_mods ? s->n_mods : 1) * sizeof(*v));

  *count = 0;
  if (!v)
    return NULL;
  s->views = v;
  for (size_t i = 0; i < s->n_mods; i++)
    v[i] = s->mods[i].m;
  *count = s->n_mods;
  return v;
}

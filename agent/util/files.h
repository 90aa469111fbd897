/* Output files: directories, the names output files share, capture stems, one warning. */
#ifndef GPUPROF_AGENT_UTIL_FILES_H
#define GPUPROF_AGENT_UTIL_FILES_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* mkdir -p: missing parents get 0755, the last component leaf_mode. 0 or -errno. */
int files_mkdir_p(const char *dir, mode_t leaf_mode);

/* This host's name for file names ("unknown" if it has none; '/' replaced by '_'). */
void files_hostname(char *buf, size_t len);

/*
 * The part of every output file name that names this process: "<host>-<pid>", or
 * "<host>-<pid>.<n>" (n = 2, 3, ...) when another live process with the same host name and pid
 * writes into the same directory: containers of one pod share the host name, and each has its
 * own pid namespace, so two workloads are often both pid 1. files_claim_name takes a lock file
 * (".gpuprof-<name>.lock", flock held for the process's life) in dir for the first free name;
 * files_name returns it (or "<host>-<pid>" when nothing was claimed, in a fork child, or when
 * dir could not be used). files_release_name removes the lock file at exit.
 */
void files_claim_name(const char *dir);
void files_name(char *buf, size_t len);
void files_release_name(void);

/*
 * An exclusive lock file: opened (created, never followed) and flock'd. Returns the fd, or
 * -EWOULDBLOCK while a live process holds it, or -errno. files_unlock removes the file, then
 * closes fd (a crashed holder leaves the file, unlocked: the next one takes it over).
 */
int files_lock(const char *path);
void files_unlock(int fd, const char *path);

/*
 * A name stem for a set of files written together (a capture's trace and its profiles), unique
 * in dir for as long as it is held, whoever else writes there: agents in other pid namespaces
 * with the same host name and pid, or this process's next capture in the same second. Tries
 * dir/base, then dir/base-<id>, then dir/base-<id>.<k> (k = 2, 3, ...) and takes the first
 * whose lock (".<stem's file name>.lock" in dir) is free and none of whose files (stem +
 * each of `others`, a NULL-terminated list) exists; creates stem + suffix there with O_EXCL,
 * empty, so nothing existing is ever truncated or replaced. 0 with the stem in stem[len] and
 * the lock held in *s until files_stem_release; -EEXIST when every name is taken, or -errno.
 * files_stem_forget drops a fork child's copy without releasing the parent's lock.
 */
struct files_stem {
  int fd;
  char lock_path[4096];
};
int files_stem_create(struct files_stem *s, const char *dir, const char *base, uint64_t id,
                      const char *suffix, const char *const *others, char *stem, size_t len);
void files_stem_release(struct files_stem *s);
void files_stem_forget(struct files_stem *s);

/* A CLOCK_REALTIME time as the UTC stamp in file names: 20261121T194038Z. */
void files_utc_stamp(uint64_t ns, char *buf, size_t len);

/*
 * Summary, profiles and captures all write into GPUPROF_OUTPUT_DIR: when it cannot be
 * written, the user gets one line for the process, from whichever writer fails first. Returns
 * 1 for the first caller (who logs), 0 afterwards.
 */
int files_first_output_error(void);

#endif

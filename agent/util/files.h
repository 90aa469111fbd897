/* Output files: directories, the names every output file shares, one warning per process. */
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

/* A CLOCK_REALTIME time as the UTC stamp in file names: 20261121T194038Z. */
void files_utc_stamp(uint64_t ns, char *buf, size_t len);

/*
 * Summary, profiles and captures all write into GPUPROF_OUTPUT_DIR: when it cannot be
 * written, the user gets one line for the process, from whichever writer fails first. Returns
 * 1 for the first caller (who logs), 0 afterwards.
 */
int files_first_output_error(void);

#endif

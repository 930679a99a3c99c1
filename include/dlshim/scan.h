/* Listing a job's dataset: every regular file under its roots, or the
 * files named in a file list. Plain library code (opendir/fstatat), used by
 * the coordinator and by tests. */
#ifndef DLSHIM_SCAN_H
#define DLSHIM_SCAN_H

#include <stddef.h>
#include <sys/stat.h>

/* Called once per regular file with its absolute path, its stat and the
 * root it was found under (the list's path for a file list). A listed path
 * that does not exist comes with `st` NULL (with peers, another node may
 * hold it). Return non-zero to stop the scan. */
typedef int (*dlshim_scan_fn)(void *ctx, const char *path, const struct stat *st, const char *root);

/* Scan `roots` (comma-separated absolute paths, as DLSHIM_ROOTS) or, when
 * `filelist` is non-empty, the paths listed in it one per line (relative
 * ones resolved against the list's directory; blank lines and lines
 * starting with '#' skipped). Directory symlinks are not followed; files
 * and directories on pseudo file systems are left out. Returns
 * the number of files, or -1 with `err` naming the problem. */
/* True for the f_type (statfs) of a pseudo file system (proc, sysfs,
 * debugfs, tracefs, cgroup, configfs, bpf, securityfs...), whose files
 * report sizes unrelated to their content: such files are never cached,
 * scanned or redirected. The fd form says 1 when fstatfs fails too. */
int dlshim_pseudo_fs(long f_type);
int dlshim_fd_on_pseudo_fs(int fd);

long dlshim_scan(const char *roots, const char *filelist, dlshim_scan_fn fn, void *ctx, char *err,
		 size_t errlen);

#endif

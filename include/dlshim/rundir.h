/* The per-user runtime directory: socket, locks and the coordinator log. */
#ifndef DLSHIM_RUNDIR_H
#define DLSHIM_RUNDIR_H

#include <stddef.h>

/* Create `dir` with mode 0700 if absent; refuse (-1) one that is not a
 * directory, not owned by the effective uid, or open to group/others. */
int rundir_ensure(const char *dir);
/* The same checks without creating anything. */
int rundir_check(const char *dir);
/* "<dir>/sock"; -1 when it does not fit in `len` (sun_path is short). */
int rundir_sock_path(const char *dir, char *out, size_t len);
/* Directory holding the shim library itself (for finding dlshimd). */
int rundir_self_dir(char *out, size_t len);

#endif

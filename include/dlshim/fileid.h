/* File versions from stat: the one place that decides which stat fields
 * tell two versions of a dataset file apart (shim, coordinator, tests). */
#ifndef DLSHIM_FILEID_H
#define DLSHIM_FILEID_H

#include <sys/stat.h>

#include "dlshim/engine.h"

/* The version `st` describes: identity, size, mtime and ctime. */
struct dlshim_file_id dlshim_stat_version(const struct stat *st);

/* True when `st` is a regular file and exactly the version `id`. */
int dlshim_stat_is_version(const struct stat *st, const struct dlshim_file_id *id);

#endif

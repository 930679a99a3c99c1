/* The coordinator's use of the HDF5 library (h5files.c). Each call takes
 * the HDF5 lock itself. */
#ifndef DLSHIM_H5FILES_H
#define DLSHIM_H5FILES_H

#include <stdint.h>

#include "dlshim/proto.h"

/* Measure dataset `dset` of the client's version of `path` (m: identity,
 * rows, row size, redirect, chunk override): 1 and *chunk_rows (rows per
 * cache item: whole HDF5 chunks) when its rows can be cached, 0 when they
 * pass through (type, layout), -1 when the file is not that version now. */
int h5files_plan(const char *path, const char *dset, const struct dlshim_msg_rows *m, uint64_t cache_bytes,
		 uint64_t *chunk_rows);
/* Read rows [first, first + count) of `dset` into buf (count * row size
 * bytes, the dataset's own type): 0, or -1 when the file is not the
 * client's version (before or after the read) or HDF5 fails. */
int h5files_read_rows(const char *path, const char *dset, const struct dlshim_msg_rows *m, uint64_t first,
		      uint64_t count, void *buf);

#endif

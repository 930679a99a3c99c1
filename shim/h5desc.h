/* What the shim knows about an HDF5 dataset id between reads (h5desc.c). */
#ifndef DLSHIM_H5DESC_H
#define DLSHIM_H5DESC_H

#include <sys/stat.h>

#include "dlshim/config.h"
#include "h5real.h"

struct h5_desc {
	int routed;               /* 0: not ours (outside the roots, writable, unnamed): pass through */
	struct stat st;           /* the file HDF5 has open (fstat of its descriptor), at most DESC_RESTAT_MS old */
	int fd;                   /* HDF5's descriptor of the file (sec2 driver) */
	char path[DLSHIM_PATH_MAX];
	char dname[1024];
};

/* Describe `dset` into *out (a copy). -1 when HDF5 cannot say (the read
 * passes through). */
int h5_desc_get(const struct h5_fns *h, h5id dset, struct h5_desc *out);

void h5desc_atfork_prepare(void);
void h5desc_atfork_parent(void);
void h5desc_atfork_child(void);

#endif

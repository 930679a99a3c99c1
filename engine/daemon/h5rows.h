/* HDF5 rows in the coordinator (h5rows.c). */
#ifndef DLSHIM_H5ROWS_H
#define DLSHIM_H5ROWS_H

#include "dlshim/proto.h"

/* Serve a ROWS request of `job`: fills `r` (HIT, not pinned, or PASS).
 * Takes D.mu itself; call without it. */
void h5rows_serve(int job, const struct dlshim_msg_rows *m, const char *path, const char *dset,
		  struct dlshim_msg_rows_r *r);
/* The job ended: drop its row mappings. Call with D.mu held. */
void h5rows_job_end(int job);

#endif

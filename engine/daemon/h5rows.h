/* HDF5 rows in the coordinator (h5rows.c). */
#ifndef DLSHIM_H5ROWS_H
#define DLSHIM_H5ROWS_H

#include "dlshim/proto.h"

/* A connection's lease of decided rows (include/dlshim/rows.h): memory
 * shared read-write with that client only. Zero-initialised = none. */
struct dlshim_rows_lease;
struct dlshim_rows_lease_shm;
struct h5rows_conn {
	struct dlshim_rows_lease_shm *shm;
	struct dlshim_rows_lease *l;
	int fd;                   /* the memory's descriptor, sent with the first fill */
	int sent;
};

/* Serve a ROWS request of `job` on connection `hc`: fills `r` (HIT, not
 * pinned, or PASS) and, when the client asked, refills its lease; *pass_fd
 * is the lease memory to send with the reply, or -1. Takes D.mu itself;
 * call without it. */
void h5rows_serve(int job, const struct dlshim_msg_rows *m, const char *path, const char *dset,
		  struct dlshim_msg_rows_r *r, struct h5rows_conn *hc, int *pass_fd);
/* The connection ended: rows taken from its lease stay consumed, the rest
 * go back to their epoch. Takes D.mu itself. */
void h5rows_conn_end(struct h5rows_conn *hc);
/* The job ended: drop its row mappings. Call with D.mu held. */
void h5rows_job_end(int job);

#endif

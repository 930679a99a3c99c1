/* H5Dread interception. A read is served from the cache only when the
 * answer is certainly the same bytes: a dataset of a file under a root,
 * opened read-only, integer or float type equal to the memory type, no
 * data transform, a file selection of whole rows (a block on the first
 * dimension, full extent on the others) and a memory selection that is one
 * contiguous run. Everything else, and any failure, goes to the real
 * H5Dread untouched. */
#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "h5desc.h"
#include "h5real.h"
#include "shim.h"

#define EXPORT __attribute__((visibility("default")))

int H5Dread(h5id dset, h5id mtype, h5id mspace, h5id fspace, h5id dxpl, void *buf);

/* Bounds of a selection that is exactly a box (as many points as its
 * bounding box); 0 when it is not one. */
static int box(const struct h5_fns *h, h5id sp, int nd, h5size *lo, h5size *hi, int64_t *npts)
{
	int64_t n = h->Sget_select_npoints(sp);
	if (n <= 0 || h->Sget_select_bounds(sp, lo, hi) < 0)
		return 0;
	int64_t vol = 1;
	for (int k = 0; k < nd; k++)
		vol *= (int64_t)(hi[k] - lo[k] + 1);
	*npts = n;
	return vol == n;
}

/* Byte offset in the memory buffer where a contiguous run of `npts`
 * elements starts, or -1 when the memory selection is not one run. */
static int64_t mem_offset(const struct h5_fns *h, h5id ms, int64_t npts, size_t esize)
{
	h5size dims[H5_MAX_RANK], lo[H5_MAX_RANK], hi[H5_MAX_RANK];
	int nd = h->Sget_simple_extent_dims(ms, dims, NULL);
	int64_t n;
	if (nd == 0)
		return h->Sget_select_npoints(ms) == npts && npts == 1 ? 0 : -1; /* scalar */
	if (nd < 0 || nd > H5_MAX_RANK || !box(h, ms, nd, lo, hi, &n) || n != npts)
		return -1;
	/* A box is one run when every dimension after some q is full and every
	 * one before q has extent 1. */
	int q = nd - 1;
	while (q > 0 && lo[q] == 0 && hi[q] + 1 == dims[q])
		q--;
	for (int k = 0; k < q; k++)
		if (lo[k] != hi[k])
			return -1;
	int64_t off = 0;
	for (int k = 0; k < nd; k++)
		off = off * (int64_t)dims[k] + (int64_t)lo[k];
	return off * (int64_t)esize;
}

static int serve(const struct h5_fns *h, h5id dset, h5id mtype, h5id mspace, h5id fspace, h5id dxpl, void *buf)
{
	struct h5_desc d;
	if (h5_desc_get(h, dset, &d) < 0 || !d.routed)
		return -1;
	if (dxpl != H5_ALL && h->Pget_data_transform(dxpl, NULL, 0) > 0)
		return -1;
	int rc = -1;
	h5id sp = h->Dget_space(dset), t = h->Dget_type(dset);
	h5size dims[H5_MAX_RANK], fd[H5_MAX_RANK], lo[H5_MAX_RANK], hi[H5_MAX_RANK];
	int nd = sp >= 0 ? h->Sget_simple_extent_dims(sp, dims, NULL) : -1;
	if (nd < 1 || nd > H5_MAX_RANK || t < 0)
		goto out;
	int cls = h->Tget_class(t);
	size_t esize = h->Tget_size(t);
	if ((cls != H5_CLASS_INTEGER && cls != H5_CLASS_FLOAT) || esize == 0 || h->Tequal(mtype, t) <= 0)
		goto out;
	uint64_t row_bytes = esize;
	for (int k = 1; k < nd; k++)
		row_bytes *= dims[k];
	h5id fs = fspace == H5_ALL ? sp : fspace;
	int64_t npts;
	if (h->Sget_simple_extent_dims(fs, fd, NULL) != nd || memcmp(fd, dims, sizeof(h5size) * (size_t)nd) != 0 ||
	    !box(h, fs, nd, lo, hi, &npts) || row_bytes == 0)
		goto out;
	for (int k = 1; k < nd; k++)
		if (lo[k] != 0 || hi[k] + 1 != dims[k])
			goto out; /* not whole rows */
	int64_t off = mspace == H5_ALL ? (int64_t)(lo[0] * row_bytes) : mem_offset(h, mspace, npts, esize);
	if (off < 0)
		goto out;
	uint64_t served = lo[0];
	/* With mspace H5S_ALL the row's place in memory is its place in the
	 * file: such a read is never redirected. */
	rc = client_rows(d.path, d.dname, &d.st, dims[0], row_bytes, lo[0], hi[0] - lo[0] + 1, mspace != H5_ALL,
			 (char *)buf + off, &served);
	if (rc < 0 && served != lo[0]) {
		/* Mapped but not served from the cache: read the mapped row here. */
		h5id fs2 = h->Scopy(sp);
		h5size cnt[H5_MAX_RANK];
		memcpy(cnt, dims, sizeof(h5size) * (size_t)nd);
		lo[0] = served;
		cnt[0] = 1;
		if (fs2 >= 0 && h->Sselect_hyperslab(fs2, H5_SELECT_SET, lo, NULL, cnt, NULL) >= 0)
			rc = h->Dread(dset, mtype, mspace, fs2, dxpl, buf) < 0 ? -2 : 0;
		else
			rc = -2;
		if (fs2 >= 0)
			h->Sclose(fs2);
	}
out:
	if (sp >= 0)
		h->Sclose(sp);
	if (t >= 0)
		h->Tclose(t);
	return rc;
}

EXPORT int H5Dread(h5id dset, h5id mtype, h5id mspace, h5id fspace, h5id dxpl, void *buf)
{
	const struct h5_fns *h = h5_real();
	if (h->Dread == NULL)
		return -1; /* cannot happen: whoever called us linked an HDF5 */
	if (g_active && !g_in_shim && h->usable && buf) {
		int saved = errno;
		g_in_shim++;
		/* Our queries must not print HDF5 error stacks into the program's stderr. */
		void *efn = NULL, *edata = NULL;
		h->Eget_auto2(H5_ALL, &efn, &edata);
		h->Eset_auto2(H5_ALL, NULL, NULL);
		int rc = serve(h, dset, mtype, mspace, fspace, dxpl, buf);
		h->Eset_auto2(H5_ALL, efn, edata);
		g_in_shim--;
		errno = saved;
		if (rc == 0)
			return 0;
		if (rc == -2)
			return -1; /* the mapped row could not be read: HDF5's own error */
	}
	return h->Dread(dset, mtype, mspace, fspace, dxpl, buf);
}

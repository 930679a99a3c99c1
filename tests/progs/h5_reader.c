/* Reads an HDF5 dataset through the HDF5 C API in the ways a training
 * program does, and writes every byte it got to stdout, so a test can
 * compare a run under the shim with a run without it.
 *
 *   h5_reader FILE DATASET rows|blocks|all|all-mem|stride|points|cols|native-conv
 *
 * rows: each row alone (hyperslab of one row, memory space of one row);
 * blocks: runs of 7 rows; all: H5S_ALL; all-mem: row blocks into a
 * full-size buffer with mem space H5S_ALL; stride/points/cols: selections
 * that are not whole rows; native-conv: memory type double (a conversion);
 * closed: row 0, then a read through the closed dataset id (must fail, as
 * without the shim, which remembers ids), then row 1 through a new id. */
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const char *what)
{
	fprintf(stderr, "h5_reader: %s failed\n", what);
	return 1;
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: h5_reader FILE DATASET MODE\n");
		return 2;
	}
	const char *mode = argv[3];
	hid_t f = H5Fopen(argv[1], H5F_ACC_RDONLY, H5P_DEFAULT);
	if (f < 0)
		return fail("H5Fopen");
	hid_t d = H5Dopen2(f, argv[2], H5P_DEFAULT);
	if (d < 0)
		return fail("H5Dopen2");
	hid_t fs = H5Dget_space(d), t = H5Dget_type(d);
	hsize_t dims[H5S_MAX_RANK];
	int nd = H5Sget_simple_extent_dims(fs, dims, NULL);
	size_t es = H5Tget_size(t), rowb = es;
	for (int i = 1; i < nd; i++)
		rowb *= dims[i];
	size_t total = rowb * dims[0];
	unsigned char *buf = calloc(1, total + 16);
	hsize_t start[H5S_MAX_RANK] = {0}, cnt[H5S_MAX_RANK], stride[H5S_MAX_RANK];
	memcpy(cnt, dims, sizeof(hsize_t) * (size_t)nd);
	int rc = 0;
	if (strcmp(mode, "rows") == 0 || strcmp(mode, "blocks") == 0 || strcmp(mode, "all-mem") == 0) {
		hsize_t step = strcmp(mode, "rows") == 0 ? 1 : 7;
		/* Rows in a scrambled order, like a shuffling sampler. */
		hsize_t nb = (dims[0] + step - 1) / step;
		for (hsize_t k = 0; k < nb && rc == 0; k++) {
			hsize_t b = (k * 7919) % nb, r0 = b * step;
			start[0] = r0;
			cnt[0] = r0 + step <= dims[0] ? step : dims[0] - r0;
			H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, cnt, NULL);
			if (strcmp(mode, "all-mem") == 0) {
				rc = H5Dread(d, t, H5S_ALL, fs, H5P_DEFAULT, buf) < 0;
				continue;
			}
			hid_t ms = H5Screate_simple(nd, cnt, NULL);
			rc = H5Dread(d, t, ms, fs, H5P_DEFAULT, buf + r0 * rowb) < 0;
			H5Sclose(ms);
		}
	} else if (strcmp(mode, "all") == 0) {
		rc = H5Dread(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0;
	} else if (strcmp(mode, "stride") == 0) {
		for (int i = 0; i < nd; i++)
			stride[i] = 1;
		stride[0] = 3;
		cnt[0] = (dims[0] + 2) / 3;
		H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, stride, cnt, NULL);
		hid_t ms = H5Screate_simple(nd, cnt, NULL);
		rc = H5Dread(d, t, ms, fs, H5P_DEFAULT, buf) < 0;
		H5Sclose(ms);
	} else if (strcmp(mode, "points") == 0) {
		hsize_t pts[3 * H5S_MAX_RANK] = {0};
		for (int p = 0; p < 3; p++)
			pts[p * nd] = (hsize_t)(p * 5) % dims[0];
		H5Sselect_elements(fs, H5S_SELECT_SET, 3, pts);
		hsize_t three = 3;
		hid_t ms = H5Screate_simple(1, &three, NULL);
		rc = H5Dread(d, t, ms, fs, H5P_DEFAULT, buf) < 0;
		H5Sclose(ms);
	} else if (strcmp(mode, "cols") == 0) {
		if (nd < 2)
			return fail("cols needs a 2-D dataset");
		cnt[1] = dims[1] > 1 ? dims[1] - 1 : 1;
		start[1] = dims[1] > 1 ? 1 : 0;
		cnt[0] = dims[0] / 2;
		H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, cnt, NULL);
		hid_t ms = H5Screate_simple(nd, cnt, NULL);
		rc = H5Dread(d, t, ms, fs, H5P_DEFAULT, buf) < 0;
		H5Sclose(ms);
	} else if (strcmp(mode, "native-conv") == 0) {
		double *db = calloc(dims[0] * (rowb / es) + 1, sizeof(double));
		rc = H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, db) < 0;
		fwrite(db, sizeof(double), dims[0] * (rowb / es), stdout);
		free(db);
		total = 0;
	} else if (strcmp(mode, "closed") == 0) {
		cnt[0] = 1;
		H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, cnt, NULL);
		hid_t ms = H5Screate_simple(nd, cnt, NULL);
		rc = H5Dread(d, t, ms, fs, H5P_DEFAULT, buf) < 0;
		hid_t d2 = H5Dopen2(f, argv[2], H5P_DEFAULT);
		H5Dclose(d);
		H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
		int served = H5Dread(d, t, ms, fs, H5P_DEFAULT, buf + rowb) >= 0;
		printf("closed id read: %s\n", served ? "served" : "refused");
		d = d2;
		start[0] = dims[0] > 1 ? 1 : 0;
		H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, cnt, NULL);
		rc = rc || d < 0 || H5Dread(d, t, ms, fs, H5P_DEFAULT, buf + rowb) < 0;
		H5Sclose(ms);
		total = 2 * rowb;
	} else {
		return fail("unknown mode");
	}
	if (rc)
		return fail("H5Dread");
	fwrite(buf, 1, total, stdout);
	free(buf);
	H5Tclose(t);
	H5Sclose(fs);
	H5Dclose(d);
	H5Fclose(f);
	return 0;
}

/* The host process's own HDF5, found at run time (h5real.c). The shim never
 * links libhdf5 nor includes its headers: it declares the few types and
 * functions it calls, valid for HDF5 1.10 and later (64-bit hid_t). */
#ifndef DLSHIM_H5REAL_H
#define DLSHIM_H5REAL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef int64_t h5id;
typedef uint64_t h5size;

#define H5_ALL ((h5id)0)        /* H5S_ALL, H5P_DEFAULT and H5E_DEFAULT are all 0 */
#define H5_ACC_RDONLY 0u
#define H5_CLASS_INTEGER 0
#define H5_CLASS_FLOAT 1
#define H5_MAX_RANK 32
#define H5_SELECT_SET 0

struct h5_fns {
	int (*Dread)(h5id, h5id, h5id, h5id, h5id, void *);
	ssize_t (*Fget_name)(h5id, char *, size_t);
	ssize_t (*Iget_name)(h5id, char *, size_t);
	h5id (*Iget_file_id)(h5id);
	int (*Fget_intent)(h5id, unsigned *);
	int (*Fclose)(h5id);
	h5id (*Dget_space)(h5id);
	h5id (*Dget_type)(h5id);
	int (*Sclose)(h5id);
	int (*Tclose)(h5id);
	int (*Sget_simple_extent_dims)(h5id, h5size *, h5size *);
	int64_t (*Sget_select_npoints)(h5id);
	int (*Sget_select_bounds)(h5id, h5size *, h5size *);
	int (*Tequal)(h5id, h5id);
	int (*Tget_class)(h5id);
	size_t (*Tget_size)(h5id);
	int (*Eget_auto2)(h5id, void **, void **);
	int (*Eset_auto2)(h5id, void *, void *);
	ssize_t (*Pget_data_transform)(h5id, char *, size_t);
	h5id (*Scopy)(h5id);
	int (*Sselect_hyperslab)(h5id, int, const h5size *, const h5size *, const h5size *, const h5size *);
	int (*Iis_valid)(h5id);
	h5id (*Fget_access_plist)(h5id);
	h5id (*Pget_driver)(h5id);
	int (*Pclose)(h5id);
	h5id (*FD_sec2_init)(void);
	int (*Fget_vfd_handle)(h5id, h5id, void **);
	int usable;               /* every function found and the version is 1.10 or later */
};

/* The resolved functions (resolution runs once, on the first call). Dread
 * is NULL only if no HDF5 is loaded at all. */
const struct h5_fns *h5_real(void);

#endif

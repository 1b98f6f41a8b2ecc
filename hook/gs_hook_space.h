/* gs_hook_space.h — the process's address space for gshare memory: per GPU
 * of the allocation a virtual range reserved on first use, granted chunks
 * mapped at their slots (gs_hook_space.c).  Everything here: pre gs_conn.mu
 * held. */
#ifndef GS_HOOK_SPACE_H
#define GS_HOOK_SPACE_H

#include "gs_hook_conn.h"

/* The gs_conn.gpus index of device dev, or -ENODEV (not in the allocation). */
int gs_space_dev_gpu(const struct gs_cu *cu, CUdevice dev);
/* The same for the current context's device (*ret_dev); -EBADR without a
 * current context. */
int gs_space_cur_gpu(const struct gs_cu *cu, CUdevice *ret_dev);
/* Reserves g's range on first use.  0, -ENOMEM or -EOPNOTSUPP. */
int gs_space_reserve(const struct gs_cu *cu, struct gs_hook_gpu *g) GS_WUR;
/* Imports fd, maps it read-write for dev (and its peers in the allocation)
 * at [at, at + size).  Closes fd.  0, or -EIO with nothing left mapped. */
int gs_space_map_fd(const struct gs_cu *cu, CUdeviceptr at, size_t size, CUdevice dev, int fd) GS_WUR;
/* Reads and maps the k grants that precede an ALLOC reply of request seq
 * on GPU gi.  Every fd received is closed, whatever happens.  0, or -EPROTO
 * / -EIO with why (the caller drops the connection). */
int gs_space_take_grants(const struct gs_cu *cu, uint32_t gi, CUdevice dev, uint64_t seq, uint64_t k,
                         const char **why) GS_WUR;
/* The GPU whose range holds ptr, or -1. */
int gs_space_owner(CUdeviceptr ptr);
/* What an allocation on a device outside the allocation (gi = -ENODEV,
 * said once on stderr) or without a context (-EBADR) gets. */
int gs_space_gpu_err(int gi, CUdevice dev);

#endif

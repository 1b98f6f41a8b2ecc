/* gs_hook_space.h — the process's address space for gshare memory: per GPU
 * of the allocation a virtual range reserved on first use, granted chunks
 * mapped at their slots (gs_hook_space.c).  Everything here: pre gs_conn.mu
 * held. */
#ifndef GS_HOOK_SPACE_H
#define GS_HOOK_SPACE_H

#include <stdbool.h>

#include "gs_hook_conn.h"

/* How long a request short of memory waits, at most, for the allocation's
 * other processes to give back chunks they hold without a live block.
 * Their hooks' threads answer at once (gs_hook_thread.h); the wait is
 * paid only while some process asked still holds such chunks (one that
 * cannot answer: an earlier release's hook, contexts past GS_CTX_MAX). */
#define GS_GIVE_BACK_PATIENCE_MS 1000u
/* Or, while chunks it is owed are moved off their borrowers (the reply's
 * others_asked has GS_OTHERS_MOVING), GS_MOVE_PATIENCE_MS (gs_wire.h);
 * it looks again at least this often, and while chunks are moved for it
 * this often (each batch frees up to GS_MOVE_MAX of them: the request
 * completes soon after the batch that frees the last it needs, not at the
 * end of the take-back). */
#define GS_WAIT_STEP_MAX_MS 10u
#define GS_WAIT_STEP_MOVING_MS 2u

/* The gs_conn.gpus index of device dev, or -ENODEV (not in the allocation). */
int gs_space_dev_gpu(const struct gs_cu *cu, CUdevice dev);
/* The devices of the allocation, a bit per CUdevice. */
uint64_t gs_space_devices(const struct gs_cu *cu);
/* The same for the current context's device (*ret_dev); -EBADR without a
 * current context. */
int gs_space_cur_gpu(const struct gs_cu *cu, CUdevice *ret_dev);
/* Reserves g's range on first use.  0, -ENOMEM or -EOPNOTSUPP. */
int gs_space_reserve(const struct gs_cu *cu, struct gs_hook_gpu *g) GS_WUR;
/* Told when a GPU's range was first reserved (pre: gs_conn.mu held): the
 * process will hold chunks (gs_hook_thread.c sets it at load). */
void gs_space_set_on_reserved(void (*fn)(void));
/* Read-write access to [at, at + size) for dev and its peers in the
 * allocation (devices outside it get nothing).  0 or -EIO. */
int gs_space_access(const struct gs_cu *cu, CUdeviceptr at, size_t size, CUdevice dev) GS_WUR;
/* Imports fd, maps it read-write for dev (and its peers in the allocation)
 * at [at, at + size).  Closes fd.  0, or -EIO with nothing left mapped. */
int gs_space_map_fd(const struct gs_cu *cu, CUdeviceptr at, size_t size, CUdevice dev, int fd) GS_WUR;
/* Reads and maps the k grants that precede an ALLOC reply of request seq
 * on GPU gi.  Every fd received is closed, whatever happens.  0, or -EPROTO
 * / -EIO with why (the caller drops the connection). */
int gs_space_take_grants(const struct gs_cu *cu, uint32_t gi, CUdevice dev, uint64_t seq, uint64_t k,
                         const char **why) GS_WUR;
/* The process unmaps slots [first, first + count) of GPU gi, once the
 * device is done with them (the current context synchronized; on a thread
 * without one, every context on the allocation's GPUs), and RELEASEs them
 * to the agent.  0; -EBUSY (the contexts could not all be synchronized:
 * kept); -EIO (one could not be unmapped: the connection is dropped,
 * nothing goes back). */
int gs_space_release(const struct gs_cu *cu, int gi, uint64_t first, uint64_t count);
/* Gives back every chunk of GPU gi with no live block (GS_OP_GIVE_BACK),
 * if the agent supports it: how many went. */
uint32_t gs_space_give_back(const struct gs_cu *cu, int gi);
/* A request failed with -ENOMEM while other processes of the allocation
 * were asked to give back chunks (its reply's others_asked): waits a
 * little, gs_conn.mu let go meanwhile, and says whether to try again
 * (*waited_ms, 0 at first, bounds the whole wait). */
bool gs_space_wait_for_others(uint32_t *waited_ms, uint32_t others_asked);
/* If the agent asked (gs_shm.give_back changed), gives back on every GPU. */
void gs_space_give_back_if_asked(const struct gs_cu *cu);
/* The GPU whose range holds ptr, or -1. */
int gs_space_owner(CUdeviceptr ptr);
/* What an allocation on a device outside the allocation (gi = -ENODEV,
 * said once on stderr) or without a context (-EBADR) gets. */
int gs_space_gpu_err(int gi, CUdevice dev);

#endif

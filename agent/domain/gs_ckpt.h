/* gs_ckpt.h — the allocations checkpoint: its line format and its file
 * (docs/design.md).  No agent state: records in, records out.
 *
 * <stateDir>/allocations, rewritten whole (gs_file.h: temporary file,
 * fsync, rename, directory fsync) on every change, one line per
 * allocation, its owner in the line:
 *     # gshare-agent allocations v3
 *     <id> <created> <n> <device id>... dir=<dir>            (device plugin)
 *     <id> <created> claim <uid> <namespace> <name> <gpu uuid> <u>,<u>,... dir=<dir>
 * Either may end in " burst=<bytes>" (the allocation's burst limit,
 * docs/burst.md; absent when unset, so such lines are as before) and
 * " qos=<class>[,cap=<n>]" (its compute policy, gs_qos.h; absent for the
 * default), in that order.
 * A device plugin's line is a v2 line unchanged; a claim's names the DRA
 * ResourceClaim and the units of the GPU it holds (unit indices, ascending).
 * v1 lines (no dir=: the directory is the id) and v2 lines are read as the
 * device plugin's.
 *
 * Migration from v2 (gs_ckpt_read): an agent before v3 kept DRA claims in
 * <stateDir>/claims ("# gshare-agent claims v1", one line
 * "<uid> <allocation id> <gpu uuid> <units> <namespace> <name>" per claim).
 * Its claims are folded into the lines of their allocations, which become
 * claim lines; a claim whose allocation has no line (that agent crashed
 * between its two writes) is dropped; a claims line that is not a claim, or
 * whose allocation's device IDs are not its GPU's units, is kept verbatim
 * beside the checkpoint's own unparsable lines.  The caller writes the v3
 * checkpoint and only then removes the claims file.
 *
 * A line that does not parse is kept byte for byte (NULs included) and
 * written back on every save.  Reading is all or nothing: a file that
 * exists but cannot be read whole (EACCES, EIO, EMFILE, a line of
 * GS_CKPT_LINE_MAX bytes or more, more than GS_CKPT_KEPT_MAX kept lines or
 * GS_CKPT_RECS_MAX records) yields no records at all, never a part: a claim
 * missing from a part would be reclaimed, and a save would erase it. */
#ifndef GS_CKPT_H
#define GS_CKPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "gs_devid.h"
#include "gs_qos.h"
#include "gs_util.h"

#define GS_CKPT_NAME "allocations"
#define GS_CKPT_CLAIMS_NAME "claims" /* v2's claims file, migrated */
#define GS_CKPT_HEADER "# gshare-agent allocations v3\n"
#define GS_ALLOCS_DIR_MAX 32    /* "<16 hex id>-<8 hex>" and a NUL */
#define GS_ALLOCS_MAX_IDS 4096u /* device IDs in one allocation */
#define GS_CKPT_RECS_MAX 65536u /* lines of one checkpoint */
#define GS_CKPT_KEPT_MAX 64u    /* lines kept verbatim, both files together */
/* A line of GS_ALLOCS_MAX_IDS device IDs fits. */
#define GS_CKPT_LINE_MAX (GS_ALLOCS_MAX_IDS * (GS_DEVID_MAX + 1) + 512)
#define GS_CLAIM_UID_MAX 36 /* a UUID */
#define GS_CLAIM_NS_MAX 63
#define GS_CLAIM_NAME_MAX 253

/* Who an allocation is for. */
enum gs_owner_kind {
        GS_OWNER_DEVICES = 1, /* the device plugin: a set of device IDs */
        GS_OWNER_CLAIM = 2,   /* a DRA ResourceClaim: units of one GPU */
};

struct gs_claim {
        char uid[GS_CLAIM_UID_MAX + 1];
        char ns[GS_CLAIM_NS_MAX + 1];
        char name[GS_CLAIM_NAME_MAX + 1];
        char gpu_uuid[GS_UUID_STR_LEN + 1];
        uint32_t units;
};

/* One line of the checkpoint.  Exactly one of: kept (a line kept as it
 * was read), kind DEVICES (ids), kind CLAIM (claim and units). */
struct gs_ckpt_rec {
        char id[17];
        uint64_t created_unix;
        char dir[GS_ALLOCS_DIR_MAX];
        enum gs_owner_kind kind;
        char **ids; /* DEVICES: sorted, one malloc'ed block */
        size_t nids;
        struct gs_claim claim;    /* CLAIM */
        uint64_t burst_bytes;     /* burst=, 0 if absent (gs_alloc_req.burst_bytes) */
        struct gs_qos_policy qos; /* qos=, the default if absent (gs_qos.h) */
        uint32_t *units;          /* CLAIM: claim.units unit indices, ascending */
        char *kept;               /* malloc'ed, without its newline; may hold NULs */
        size_t kept_len;
};

/* What gs_ckpt_read found. */
struct gs_ckpt {
        struct gs_ckpt_rec *recs;
        size_t n;
        bool claims_file; /* a v2 claims file was read (and folded in) */
        size_t claims_migrated, claims_dropped;
};

/* A sorted malloc'ed copy of ids[0..n) in one block (pointers, then the
 * strings); NULL: out of memory. */
char **gs_ckpt_sorted_ids(const char *const *ids, size_t n);

/* Parses one line (len bytes, no newline; modified in place) into r, whose
 * ids or units are malloc'ed.  0, -EINVAL (not a line of any version), or
 * -ENOMEM. */
int gs_ckpt_parse_line(char *line, size_t len, struct gs_ckpt_rec *r) GS_WUR;
/* Parses one line of v2's claims file (modified in place).  0 or -EINVAL. */
int gs_ckpt_parse_claims_line(char *line, struct gs_claim *c, char ret_alloc_id[17]) GS_WUR;

/* Writes r's line, newline included. */
void gs_ckpt_put(FILE *f, const struct gs_ckpt_rec *r);
/* Writes an allocation's line (what gs_ckpt_put writes for its record). */
void gs_ckpt_put_devices(FILE *f, const char *id, uint64_t created, const char *dir, uint64_t burst,
                         const struct gs_qos_policy *qos, char *const *ids, size_t n);
void gs_ckpt_put_claim(FILE *f, const char *id, uint64_t created, const char *dir, uint64_t burst,
                       const struct gs_qos_policy *qos, const struct gs_claim *c, const uint32_t *units, size_t nunits);

/* Reads <state_dir>/allocations and, if there is one, v2's claims file,
 * folding the claims into their lines.  0 (no files: no records), or a
 * negative errno with err naming the file and the problem, *ret empty. */
int gs_ckpt_read(const char *state_dir, struct gs_ckpt *ret, char *err, size_t errlen) GS_WUR;

void gs_ckpt_rec_free(struct gs_ckpt_rec *r);
void gs_ckpt_free(struct gs_ckpt *c);

#endif

/* check_recon.c — the reconciler's two halves without a kubelet
 * (gs_recon.h): a PodResources List reply made into a snapshot, and a
 * snapshot applied to the agent's allocations (who holds what; reclaim
 * only after the grace, and never on a partial hold); the owner decides
 * (a DRA claim's allocation is never reclaimed); and the checkpoint it
 * depends on (gs_restore.h): never reclaim on a checkpoint, or a v2
 * claims file left to migrate, that cannot be read, and keep the lines it
 * cannot use. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gs_allocs.h"
#include "gs_pending.h"
#include "gs_podburst.h"
#include "gs_restore.h"
#include "gs_check.h"
#include "gs_recon.h"
#include "podresources_v1.pb-c.h"

#define RES "gshare.io/gpumem"
#define U "GPU-00000000-0000-0000-0000-000000000001"

/* One pod with one container holding ids[0..n) of resource res. */
struct fake_reply {
        V1__ListPodResourcesResponse m;
        V1__PodResources pod, *pods[1];
        V1__ContainerResources ctr, *ctrs[1];
        V1__ContainerDevices dev[2], *devs[2];
};

static void reply(struct fake_reply *f, const char *res, char **ids, size_t n)
{
        memset(f, 0, sizeof(*f));
        f->m = (V1__ListPodResourcesResponse)V1__LIST_POD_RESOURCES_RESPONSE__INIT;
        f->pod = (V1__PodResources)V1__POD_RESOURCES__INIT;
        f->ctr = (V1__ContainerResources)V1__CONTAINER_RESOURCES__INIT;
        for (int i = 0; i < 2; i++) {
                f->dev[i] = (V1__ContainerDevices)V1__CONTAINER_DEVICES__INIT;
                f->devs[i] = &f->dev[i];
        }
        f->pod.name = (char *)"train";
        f->pod.namespace_ = (char *)"ml";
        f->ctr.name = (char *)"main";
        /* Split over two NUMA entries, and a foreign resource beside. */
        f->dev[0].resource_name = (char *)res;
        f->dev[0].device_ids = ids;
        f->dev[0].n_device_ids = n;
        f->dev[1].resource_name = (char *)"nvidia.com/gpu";
        f->dev[1].device_ids = ids;
        f->dev[1].n_device_ids = n;
        f->ctr.devices = f->devs;
        f->ctr.n_devices = 2;
        f->ctrs[0] = &f->ctr;
        f->pod.containers = f->ctrs;
        f->pod.n_containers = 1;
        f->pods[0] = &f->pod;
        f->m.pod_resources = f->pods;
        f->m.n_pod_resources = 1;
}

static struct gs_recon_snapshot *snap(char **ids, size_t n)
{
        struct gs_recon_snapshot *s = NULL;
        struct fake_reply f;
        char err[256];

        reply(&f, RES, ids, n);
        ck_assert_int_eq(gs_recon_snapshot_new(&f.m.base, RES, &s, err, sizeof(err)), 0);
        return s;
}

/* An allocation of the given device IDs, with no GPU part and no socket:
 * what gs_recon_apply and a release need of it. */
static struct gs_allocation *alloc(struct gs_agent *ag, const char *id, const char *const *ids, size_t n,
                                   uint64_t created)
{
        struct gs_allocation *a = calloc(1, sizeof(*a));
        char **v = calloc(n, sizeof(*v) + 64);

        ck_assert_ptr_nonnull(a);
        ck_assert_ptr_nonnull(v);
        for (size_t i = 0; i < n; i++) {
                v[i] = (char *)(v + n) + 64 * i;
                snprintf(v[i], 64, "%s", ids[i]);
        }
        a->node = &ag->node;
        a->kind = GS_OWNER_DEVICES;
        snprintf(a->id, sizeof(a->id), "%s", id);
        a->device_ids = v;
        a->ndevice_ids = n;
        a->created_unix = created;
        a->listen_fd = -1;
        a->next = ag->node.allocs;
        ag->node.allocs = a;
        ag->node.nallocs++;
        return a;
}

/* The allocation of claim uid (with no unit: no GPU here). */
static struct gs_allocation *claim_alloc(struct gs_agent *ag, const char *id, const char *uid, uint64_t created)
{
        struct gs_allocation *a = alloc(ag, id, NULL, 0, created);

        a->kind = GS_OWNER_CLAIM;
        snprintf(a->claim.uid, sizeof(a->claim.uid), "%s", uid);
        snprintf(a->claim.ns, sizeof(a->claim.ns), "ml");
        snprintf(a->claim.name, sizeof(a->claim.name), "train-gpu");
        snprintf(a->claim.gpu_uuid, sizeof(a->claim.gpu_uuid), U);
        a->claim.units = 1;
        return a;
}

static void agent_init(struct gs_agent *ag, char *dir)
{
        memset(ag, 0, sizeof(*ag));
        ck_assert_ptr_nonnull(mkdtemp(dir));
        snprintf(ag->node.cfg.state_dir, sizeof(ag->node.cfg.state_dir), "%s", dir);
        ck_assert_int_eq(gs_loop_new(&ag->node.loop), 0);
}

/* A pod's burst annotation (gs_podburst.h) from the API server's JSON. */
START_TEST(test_podburst_parse)
{
        static const char ok[] = "{\"kind\":\"Pod\",\"metadata\":{\"name\":\"p\",\"annotations\":"
                                 "{\"a.io/x\":\"1\",\"gshare.io/gpumem-burst\":\"40Gi\"}}}";
        static const char none[] = "{\"kind\":\"Pod\",\"metadata\":{\"name\":\"p\"}}";
        static const char bad[] =
                "{\"kind\":\"Pod\",\"metadata\":{\"annotations\":{\"gshare.io/gpumem-burst\":\"1.5Gi\"}}}";
        static const char zero[] =
                "{\"kind\":\"Pod\",\"metadata\":{\"annotations\":{\"gshare.io/gpumem-burst\":\"0\"}}}";
        static const char status[] = "{\"kind\":\"Status\",\"code\":404}";
        char err[256];
        uint64_t b = 1;

        ck_assert_int_eq(gs_podburst_parse(ok, strlen(ok), &b, err, sizeof(err)), 0);
        ck_assert_uint_eq(b, 40ull << 30);
        ck_assert_int_eq(gs_podburst_parse(none, strlen(none), &b, err, sizeof(err)), 0);
        ck_assert_uint_eq(b, 0);
        ck_assert_int_eq(gs_podburst_parse(bad, strlen(bad), &b, err, sizeof(err)), -EINVAL);
        ck_assert_uint_eq(b, 0);
        ck_assert_ptr_nonnull(strstr(err, "'1.5Gi' is not a size"));
        ck_assert_int_eq(gs_podburst_parse(zero, strlen(zero), &b, err, sizeof(err)), -EINVAL);
        ck_assert_int_eq(gs_podburst_parse(status, strlen(status), &b, err, sizeof(err)), -EINVAL);
        ck_assert_ptr_nonnull(strstr(err, "not a Pod"));
        ck_assert_int_eq(gs_podburst_parse("{\"kind\":", 8, &b, err, sizeof(err)), -EINVAL);
}
END_TEST

START_TEST(test_snapshot_refuses_too_many)
{
        size_t n = GS_RECON_MAX_IDS + 1;
        char **ids = calloc(n, sizeof(*ids));
        struct gs_recon_snapshot *s = NULL;
        struct fake_reply f;
        char err[256] = "";

        for (size_t i = 0; i < n; i++)
                ids[i] = (char *)(U "-0");
        reply(&f, RES, ids, n);
        ck_assert_int_eq(gs_recon_snapshot_new(&f.m.base, RES, &s, err, sizeof(err)), -E2BIG);
        ck_assert_ptr_null(s);
        ck_assert_ptr_nonnull(strstr(err, "more than"));
        free(ids);
}
END_TEST

START_TEST(test_apply)
{
        char dir[] = "/tmp/gsreconXXXXXX";
        const char *ids_a[] = { U "-0", U "-1" }, *ids_b[] = { U "-2" }, *ids_c[] = { U "-3" };
        char h1[] = U "-1", h3[] = U "-3";
        char *held[] = { h1, h3 };
        struct gs_recon_snapshot *s, *none;
        struct gs_allocation *a, *b, *c;
        struct gs_agent ag;
        uint64_t now = 1000000;
        char path[300];

        agent_init(&ag, dir);
        a = alloc(&ag, "aaaaaaaaaaaaaaaa", ids_a, 2, now - 100);
        b = alloc(&ag, "bbbbbbbbbbbbbbbb", ids_b, 1, now - 100);
        c = alloc(&ag, "cccccccccccccccc", ids_c, 1, now); /* just made */
        s = snap(held, 2);
        none = snap(NULL, 0);

        /* One of a's IDs is held: a is the pod's.  b is unheld from now. */
        ck_assert_uint_eq(gs_recon_apply(&ag, s, 5000, now, 2000), 0);
        ck_assert_str_eq(a->pod_namespace, "ml");
        ck_assert_str_eq(a->pod_name, "train");
        ck_assert_str_eq(a->container_name, "main");
        ck_assert_int_eq(a->unheld_since_ms, 0);
        ck_assert_int_eq(b->unheld_since_ms, 5000);
        /* Within the grace nothing goes; past it b goes, c (held) stays. */
        ck_assert_uint_eq(gs_recon_apply(&ag, s, 6999, now, 2000), 0);
        ck_assert_uint_eq(gs_recon_apply(&ag, s, 7000, now, 2000), 1);
        ck_assert_uint_eq(ag.node.nallocs, 2);
        for (struct gs_allocation *x = ag.node.allocs; x; x = x->next)
                ck_assert_ptr_ne(x, b);
        /* Nothing held any more: c was made just now, so the grace also
         * counts from its creation; a goes after its own grace. */
        ck_assert_uint_eq(gs_recon_apply(&ag, none, 8000, now, 2000), 0);
        ck_assert_uint_eq(gs_recon_apply(&ag, none, 10000, now + 1, 2000), 1);
        ck_assert_uint_eq(ag.node.nallocs, 1);
        ck_assert_ptr_eq(ag.node.allocs, c);
        ck_assert_uint_eq(gs_recon_apply(&ag, none, 10000, now + 2, 2000), 1);
        ck_assert_uint_eq(ag.node.nallocs, 0);
        gs_recon_snapshot_free(s);
        gs_recon_snapshot_free(none);
        gs_loop_free(ag.node.loop); /* frees the released allocations */
        snprintf(path, sizeof(path), "%s/%s", dir, GS_CHECKPOINT_NAME);
        ck_assert_int_eq(unlink(path), 0); /* each release rewrote it */
        ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

#define CLAIM1 "11111111-1111-1111-1111-111111111111"
#define CLAIM2 "22222222-2222-2222-2222-222222222222"
#define HEADER "# gshare-agent allocations v3\n"

static void write_file(const char *path, const char *s, size_t len)
{
        FILE *f = fopen(path, "we");

        ck_assert_ptr_nonnull(f);
        ck_assert_uint_eq(fwrite(s, 1, len, f), len);
        ck_assert_int_eq(fclose(f), 0);
}

static size_t read_all(const char *path, char *buf, size_t cap)
{
        FILE *f = fopen(path, "re");
        size_t n;

        ck_assert_ptr_nonnull(f);
        n = fread(buf, 1, cap, f);
        fclose(f);
        return n;
}

static bool has_alloc(struct gs_agent *ag, const struct gs_allocation *a)
{
        for (struct gs_allocation *x = ag->node.allocs; x; x = x->next)
                if (x == a)
                        return true;
        return false;
}

/* With the allocations unknown, claims are neither made nor released, and
 * no device plugin's allocation released (a save would erase the file);
 * err names the file that cannot be read (path). */
static void assert_refused(struct gs_agent *ag, const char *path, int want, struct gs_allocation *dp)
{
        struct gs_alloc_req req = { .kind = GS_OWNER_CLAIM };
        struct gs_allocation *x = NULL;
        bool created = false;
        char err[PATH_MAX + 512] = "";

        snprintf(req.claim.uid, sizeof(req.claim.uid), CLAIM2);
        snprintf(req.claim.ns, sizeof(req.claim.ns), "ml");
        snprintf(req.claim.name, sizeof(req.claim.name), "c2");
        snprintf(req.claim.gpu_uuid, sizeof(req.claim.gpu_uuid), U);
        req.claim.units = 1;
        ck_assert_int_eq(gs_restore_create(&ag->node, &req, &x, &created, err, sizeof(err)), want);
        ck_assert_msg(strstr(err, path) && strstr(err, strerror(-want)), "err: %s", err);
        err[0] = '\0';
        ck_assert_int_eq(gs_restore_release_claim(&ag->node, CLAIM2, err, sizeof(err)), want);
        ck_assert_msg(strstr(err, path), "err: %s", err);
        ck_assert_int_eq(gs_allocs_release(&ag->node, dp, err, sizeof(err)), want);
        ck_assert(!dp->releasing);
}

/* The end of a checkpoint test: the agent gone, its checkpoint and state
 * directory removed. */
static void ckpt_done(struct gs_agent *ag, struct gs_recon_snapshot *none, const char *dir)
{
        char path[300];

        gs_recon_snapshot_free(none);
        gs_allocs_shutdown(&ag->node);
        gs_loop_free(ag->node.loop);
        snprintf(path, sizeof(path), "%s/%s", dir, GS_CKPT_NAME);
        ck_assert_int_eq(unlink(path), 0);
        ck_assert_int_eq(rmdir(dir), 0);
}

/* A checkpoint that exists but cannot be read is not an empty one: nothing
 * is reclaimed, however long, until it reads; nor while a v2 claims file
 * left to migrate cannot be read.  Then claims are spared again and only
 * the device plugin's allocations go. */
START_TEST(test_ckpt_unreadable)
{
        char dir[] = "/tmp/gsreconXXXXXX";
        const char *ids_b[] = { U "-1" };
        struct gs_recon_snapshot *none;
        struct gs_allocation *a, *b;
        struct gs_agent ag;
        uint64_t now = 1000000;
        char path[300], cpath[300];
        struct stat st;

        agent_init(&ag, dir);
        snprintf(path, sizeof(path), "%s/%s", dir, GS_CKPT_NAME);
        snprintf(cpath, sizeof(cpath), "%s/%s", dir, GS_CKPT_CLAIMS_NAME);
        a = claim_alloc(&ag, "aaaaaaaaaaaaaaaa", CLAIM1, now - 100);
        b = alloc(&ag, "bbbbbbbbbbbbbbbb", ids_b, 1, now - 100);
        none = snap(NULL, 0);

        /* The open fails (ELOOP: a symlink to itself). */
        ck_assert_int_eq(symlink(GS_CKPT_NAME, path), 0);
        ck_assert_int_eq(gs_restore_start(&ag.node), -ELOOP);
        ck_assert_uint_eq(gs_recon_apply(&ag, none, 5000, now, 2000), 0);
        ck_assert_uint_eq(gs_recon_apply(&ag, none, 60000, now + 60, 2000), 0);
        ck_assert(has_alloc(&ag, a) && has_alloc(&ag, b));
        assert_refused(&ag, path, -ELOOP, b);
        ck_assert_int_eq(lstat(path, &st), 0);
        ck_assert(S_ISLNK(st.st_mode)); /* not replaced by a save */
        ck_assert_int_eq(unlink(path), 0);

        /* The open succeeds, the read fails (EISDIR). */
        ck_assert_int_eq(mkdir(path, 0700), 0);
        ck_assert_uint_eq(gs_recon_apply(&ag, none, 61000, now + 61, 2000), 0);
        assert_refused(&ag, path, -EISDIR, b);
        ck_assert_int_eq(rmdir(path), 0);

        /* Permission (root reads through it, so only as another user). */
        if (geteuid() != 0) {
                write_file(path, HEADER, strlen(HEADER));
                ck_assert_int_eq(chmod(path, 0), 0);
                ck_assert_uint_eq(gs_recon_apply(&ag, none, 62000, now + 62, 2000), 0);
                assert_refused(&ag, path, -EACCES, b);
                ck_assert_int_eq(unlink(path), 0);
        }

        /* The checkpoint reads, a v2 claims file beside it does not. */
        write_file(path, HEADER, strlen(HEADER));
        ck_assert_int_eq(mkdir(cpath, 0700), 0);
        ck_assert_uint_eq(gs_recon_apply(&ag, none, 63000, now + 63, 2000), 0);
        assert_refused(&ag, cpath, -EISDIR, b);
        ck_assert(has_alloc(&ag, a) && has_alloc(&ag, b));
        ck_assert_int_eq(read_all(path, (char[64]){ 0 }, 64), strlen(HEADER)); /* as it was */
        ck_assert_int_eq(rmdir(cpath), 0);

        /* Readable again, it is read at the next pass: a is a claim's and
         * stays; b, the device plugin's, goes (unheld since 5000). */
        ck_assert_uint_eq(gs_recon_apply(&ag, none, 64000, now + 64, 2000), 1);
        ck_assert(has_alloc(&ag, a));
        ck_assert(!has_alloc(&ag, b));
        ck_assert_int_eq(ag.node.ckpt_err, 0);

        ckpt_done(&ag, none, dir);
}
END_TEST

/* Out of fds when the checkpoint is read (EMFILE): nothing is reclaimed,
 * and the read is tried again at the next pass. */
START_TEST(test_ckpt_emfile)
{
        char dir[] = "/tmp/gsreconXXXXXX";
        const char *ids_b[] = { U "-1" };
        struct gs_recon_snapshot *none;
        struct gs_allocation *a, *b;
        struct gs_agent ag;
        uint64_t now = 1000000;
        struct rlimit old, low;
        int fds[256], nfds = 0, fd;
        char path[300];

        agent_init(&ag, dir);
        snprintf(path, sizeof(path), "%s/%s", dir, GS_CKPT_NAME);
        write_file(path, HEADER, strlen(HEADER));
        a = claim_alloc(&ag, "aaaaaaaaaaaaaaaa", CLAIM1, now - 100);
        b = alloc(&ag, "bbbbbbbbbbbbbbbb", ids_b, 1, now - 100);
        none = snap(NULL, 0);

        ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &old), 0);
        low = old;
        low.rlim_cur = 64;
        ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &low), 0);
        fds[nfds++] = open("/dev/null", O_RDONLY | O_CLOEXEC);
        ck_assert_int_ge(fds[0], 0);
        while (nfds < 256 && (fd = fcntl(fds[0], F_DUPFD_CLOEXEC, 0)) >= 0)
                fds[nfds++] = fd;
        ck_assert_int_eq(errno, EMFILE);
        ck_assert_int_eq(gs_restore_start(&ag.node), -EMFILE);
        ck_assert_uint_eq(gs_recon_apply(&ag, none, 5000, now, 2000), 0);
        ck_assert_uint_eq(gs_recon_apply(&ag, none, 60000, now + 60, 2000), 0);
        while (nfds)
                close(fds[--nfds]);
        ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &old), 0);
        ck_assert(has_alloc(&ag, a));
        ck_assert(has_alloc(&ag, b));

        /* fds again: the checkpoint read, a is spared, b (unheld since
         * 5000) goes. */
        ck_assert_uint_eq(gs_recon_apply(&ag, none, 61000, now + 61, 2000), 1);
        ck_assert(has_alloc(&ag, a));
        ck_assert(!has_alloc(&ag, b));

        ckpt_done(&ag, none, dir);
}
END_TEST

/* Lines that do not parse survive a save byte for byte (a NUL and all),
 * and an allocation whose id one holds is never reclaimed; a claim's line
 * that cannot be restored (no such GPU) stays as it was. */
START_TEST(test_ckpt_malformed_kept)
{
        static const char tail[] =
                "eeeeeeeeeeeeeeee 1700000000 claim " CLAIM2 " ml later " U " 4,5 dir=eeeeeeeeeeeeeeee-00000001\n"
                "bbbbbbbbbbbbbbbb 1700000000 claim " CLAIM1 " ml garbled " U " x dir=b\n" /* holds b's id */
                "not a line\0 at all\n"
                "   \n";
        char dir[] = "/tmp/gsreconXXXXXX";
        const char *ids_a[] = { U "-0" }, *ids_b[] = { U "-1" }, *ids_c[] = { U "-2" };
        char file[4096], path[300];
        struct gs_recon_snapshot *none;
        struct gs_allocation *a, *b, *c;
        struct gs_agent ag;
        uint64_t now = 1000000;
        size_t n, tl = sizeof(tail) - 1;

        agent_init(&ag, dir);
        snprintf(path, sizeof(path), "%s/%s", dir, GS_CKPT_NAME);
        n = (size_t)snprintf(file, sizeof(file), "%s", HEADER);
        memcpy(file + n, tail, tl);
        write_file(path, file, n + tl);
        ck_assert_int_eq(gs_restore_start(&ag.node), 0);
        ck_assert_ptr_nonnull(ag.node.pending);
        a = alloc(&ag, "aaaaaaaaaaaaaaaa", ids_a, 1, now - 100);
        b = alloc(&ag, "bbbbbbbbbbbbbbbb", ids_b, 1, now - 100);
        c = alloc(&ag, "cccccccccccccccc", ids_c, 1, now - 100);
        none = snap(NULL, 0);

        ck_assert_uint_eq(gs_recon_apply(&ag, none, 5000, now, 2000), 0);
        ck_assert_uint_eq(gs_recon_apply(&ag, none, 60000, now + 60, 2000), 2);
        ck_assert(!has_alloc(&ag, a));
        ck_assert(has_alloc(&ag, b));
        ck_assert(!has_alloc(&ag, c));
        ck_assert(gs_pending_kept_names(&ag.node, b->id));

        /* The releases saved it: the lines are as they were, in order. */
        n = read_all(path, file, sizeof(file));
        ck_assert_uint_ge(n, tl);
        ck_assert(memcmp(file + n - tl, tail, tl) == 0);

        /* And a restarted agent still spares b. */
        gs_pending_free_all(&ag.node);
        ag.node.ckpt_err = -EIO;
        ck_assert_uint_eq(gs_recon_apply(&ag, none, 90000, now + 90, 2000), 0);
        ck_assert_int_eq(ag.node.ckpt_err, 0);
        ck_assert(has_alloc(&ag, b));

        ckpt_done(&ag, none, dir);
}
END_TEST

/* Memory stays bounded: a file past the bounds (too many lines that do not
 * parse, a line too long) is not read into memory but refused whole, as
 * unreadable: nothing reclaimed, the file left as it is. */
START_TEST(test_ckpt_bounds)
{
        char dir[] = "/tmp/gsreconXXXXXX";
        const char *ids_b[] = { U "-1" };
        struct gs_recon_snapshot *none;
        struct gs_allocation *b;
        struct gs_agent ag;
        uint64_t now = 1000000;
        size_t cap = GS_CKPT_LINE_MAX + 64, n = 0;
        char *file = malloc(cap), *back = malloc(cap), path[300];

        ck_assert_ptr_nonnull(file);
        ck_assert_ptr_nonnull(back);
        agent_init(&ag, dir);
        snprintf(path, sizeof(path), "%s/%s", dir, GS_CKPT_NAME);
        b = alloc(&ag, "bbbbbbbbbbbbbbbb", ids_b, 1, now - 100);
        none = snap(NULL, 0);

        for (unsigned i = 0; i <= GS_CKPT_KEPT_MAX; i++)
                n += (size_t)snprintf(file + n, cap - n, "bad line %u\n", i);
        write_file(path, file, n);
        ck_assert_int_eq(gs_restore_start(&ag.node), -EFBIG);
        ck_assert_uint_eq(gs_recon_apply(&ag, none, 5000, now, 2000), 0);
        ck_assert_uint_eq(gs_recon_apply(&ag, none, 60000, now + 60, 2000), 0);
        assert_refused(&ag, path, -EFBIG, b);
        ck_assert_uint_eq(read_all(path, back, cap), n);
        ck_assert(memcmp(file, back, n) == 0);

        memset(file, 'x', GS_CKPT_LINE_MAX + 1);
        file[GS_CKPT_LINE_MAX + 1] = '\n';
        write_file(path, file, GS_CKPT_LINE_MAX + 2);
        ck_assert_uint_eq(gs_recon_apply(&ag, none, 61000, now + 61, 2000), 0);
        assert_refused(&ag, path, -EFBIG, b);
        ck_assert(has_alloc(&ag, b));

        /* At the bounds it reads (the line without its newline, at the end
         * of the file): b goes. */
        write_file(path, file, GS_CKPT_LINE_MAX);
        ck_assert_uint_eq(gs_recon_apply(&ag, none, 62000, now + 62, 2000), 1);

        ckpt_done(&ag, none, dir);
        free(file);
        free(back);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("recon");
        TCase *t = tcase_create("recon");

        tcase_add_test(t, test_podburst_parse);
        tcase_add_test(t, test_snapshot_refuses_too_many);
        tcase_add_test(t, test_apply);
        tcase_add_test(t, test_ckpt_unreadable);
        tcase_add_test(t, test_ckpt_emfile);
        tcase_add_test(t, test_ckpt_malformed_kept);
        tcase_add_test(t, test_ckpt_bounds);
        suite_add_tcase(s, t);
        return gs_check_run(s);
}

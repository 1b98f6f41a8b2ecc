/* check_recon.c — the reconciler's two halves without a kubelet
 * (gs_recon.h): a PodResources List reply made into a snapshot, and a
 * snapshot applied to the agent's allocations (who holds what; reclaim
 * only after the grace, and never on a partial hold); and the DRA claims
 * table it consults (gs_claims.h): never reclaim on a claims file that
 * cannot be read, and keep the lines it cannot use. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gs_allocs.h"
#include "gs_claims.h"
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
static struct gs_allocation *alloc(struct gs_agent *ag, const char *id, const char *const *ids,
                                   size_t n, uint64_t created)
{
        struct gs_allocation *a = calloc(1, sizeof(*a));
        char **v = calloc(n, sizeof(*v) + 64);

        ck_assert_ptr_nonnull(a);
        ck_assert_ptr_nonnull(v);
        for (size_t i = 0; i < n; i++) {
                v[i] = (char *)(v + n) + 64 * i;
                snprintf(v[i], 64, "%s", ids[i]);
        }
        a->agent = ag;
        snprintf(a->id, sizeof(a->id), "%s", id);
        a->device_ids = v;
        a->ndevice_ids = n;
        a->created_unix = created;
        a->listen_fd = -1;
        a->next = ag->allocs;
        ag->allocs = a;
        ag->nallocs++;
        return a;
}

static void agent_init(struct gs_agent *ag, char *dir)
{
        memset(ag, 0, sizeof(*ag));
        ck_assert_ptr_nonnull(mkdtemp(dir));
        snprintf(ag->cfg.state_dir, sizeof(ag->cfg.state_dir), "%s", dir);
        ck_assert_int_eq(gs_loop_new(&ag->loop), 0);
}

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
        ck_assert_uint_eq(ag.nallocs, 2);
        for (struct gs_allocation *x = ag.allocs; x; x = x->next)
                ck_assert_ptr_ne(x, b);
        /* Nothing held any more: c was made just now, so the grace also
         * counts from its creation; a goes after its own grace. */
        ck_assert_uint_eq(gs_recon_apply(&ag, none, 8000, now, 2000), 0);
        ck_assert_uint_eq(gs_recon_apply(&ag, none, 10000, now + 1, 2000), 1);
        ck_assert_uint_eq(ag.nallocs, 1);
        ck_assert_ptr_eq(ag.allocs, c);
        ck_assert_uint_eq(gs_recon_apply(&ag, none, 10000, now + 2, 2000), 1);
        ck_assert_uint_eq(ag.nallocs, 0);
        gs_recon_snapshot_free(s);
        gs_recon_snapshot_free(none);
        gs_claims_free(&ag);
        gs_loop_free(ag.loop); /* frees the released allocations */
        snprintf(path, sizeof(path), "%s/%s", dir, GS_CHECKPOINT_NAME);
        ck_assert_int_eq(unlink(path), 0); /* each release rewrote it */
        ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

#define CLAIM1 "11111111-1111-1111-1111-111111111111"
#define CLAIM2 "22222222-2222-2222-2222-222222222222"
#define HEADER "# gshare-agent claims v1\n"
/* A claims line naming allocation aaaa... */
#define LINE_A CLAIM1 " aaaaaaaaaaaaaaaa " U " 1 ml train-gpu\n"

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
        for (struct gs_allocation *x = ag->allocs; x; x = x->next)
                if (x == a)
                        return true;
        return false;
}

/* With the claims unknown, claims are neither made nor released (a save
 * would erase the file), and err names the file. */
static void assert_claims_refused(struct gs_agent *ag, const char *path, int want)
{
        struct gs_allocation *x = NULL;
        bool created = false;
        char err[PATH_MAX + 256] = "";

        ck_assert_int_eq(gs_claims_create(ag, CLAIM2, "ml", "c2", U, 1, &x, &created, err, sizeof(err)),
                         want);
        ck_assert_msg(strstr(err, path) && strstr(err, strerror(-want)), "err: %s", err);
        err[0] = '\0';
        ck_assert_int_eq(gs_claims_release(ag, CLAIM2, err, sizeof(err)), want);
        ck_assert_msg(strstr(err, path), "err: %s", err);
}

/* The end of a claims test: the agent gone, its claims file (at path),
 * checkpoint and state directory removed. */
static void claims_done(struct gs_agent *ag, struct gs_recon_snapshot *none, const char *dir, char *path,
                        size_t pathlen)
{
        gs_recon_snapshot_free(none);
        gs_allocs_shutdown(ag);
        gs_claims_free(ag);
        gs_loop_free(ag->loop);
        ck_assert_int_eq(unlink(path), 0);
        snprintf(path, pathlen, "%s/%s", dir, GS_CHECKPOINT_NAME);
        ck_assert_int_eq(unlink(path), 0);
        ck_assert_int_eq(rmdir(dir), 0);
}

/* A claims file that exists but cannot be read is not an empty table:
 * nothing is reclaimed, however long, until it reads; then claims are
 * spared again and only unclaimed allocations go. */
START_TEST(test_claims_unreadable)
{
        char dir[] = "/tmp/gsreconXXXXXX";
        const char *ids_a[] = { U "-0" }, *ids_b[] = { U "-1" };
        struct gs_recon_snapshot *none;
        struct gs_allocation *a, *b;
        struct gs_agent ag;
        uint64_t now = 1000000;
        char path[300];
        struct stat st;

        agent_init(&ag, dir);
        snprintf(path, sizeof(path), "%s/%s", dir, GS_CLAIMS_NAME);
        a = alloc(&ag, "aaaaaaaaaaaaaaaa", ids_a, 1, now - 100);
        none = snap(NULL, 0);

        /* The open fails (ELOOP: a symlink to itself). */
        ck_assert_int_eq(symlink(GS_CLAIMS_NAME, path), 0);
        ck_assert_uint_eq(gs_recon_apply(&ag, none, 5000, now, 2000), 0);
        ck_assert_uint_eq(gs_recon_apply(&ag, none, 60000, now + 60, 2000), 0);
        ck_assert(has_alloc(&ag, a));
        assert_claims_refused(&ag, path, -ELOOP);
        ck_assert_int_eq(lstat(path, &st), 0);
        ck_assert(S_ISLNK(st.st_mode)); /* not replaced by a save */
        ck_assert_int_eq(unlink(path), 0);

        /* The open succeeds, the read fails (EISDIR). */
        ck_assert_int_eq(mkdir(path, 0700), 0);
        ck_assert_uint_eq(gs_recon_apply(&ag, none, 61000, now + 61, 2000), 0);
        assert_claims_refused(&ag, path, -EISDIR);
        ck_assert_int_eq(rmdir(path), 0);

        /* Permission (root reads through it, so only as another user). */
        if (geteuid() != 0) {
                write_file(path, HEADER LINE_A, strlen(HEADER LINE_A));
                ck_assert_int_eq(chmod(path, 0), 0);
                ck_assert_uint_eq(gs_recon_apply(&ag, none, 62000, now + 62, 2000), 0);
                assert_claims_refused(&ag, path, -EACCES);
                ck_assert_int_eq(unlink(path), 0);
        }
        ck_assert(has_alloc(&ag, a));

        /* Readable again, it is read at the next pass: a is a claim's and
         * stays; b, unclaimed, goes after its grace. */
        write_file(path, HEADER LINE_A, strlen(HEADER LINE_A));
        b = alloc(&ag, "bbbbbbbbbbbbbbbb", ids_b, 1, now - 100);
        ck_assert_uint_eq(gs_recon_apply(&ag, none, 63000, now + 63, 2000), 0);
        ck_assert_uint_eq(gs_recon_apply(&ag, none, 65000, now + 65, 2000), 1);
        ck_assert(has_alloc(&ag, a));
        ck_assert(!has_alloc(&ag, b));
        ck_assert_ptr_nonnull(gs_claims_of(&ag, a));

        claims_done(&ag, none, dir, path, sizeof(path));
}
END_TEST

/* Out of fds when the reconciler first reads the claims (EMFILE): nothing
 * is reclaimed, and the read is tried again at the next pass. */
START_TEST(test_claims_emfile)
{
        char dir[] = "/tmp/gsreconXXXXXX";
        const char *ids_a[] = { U "-0" }, *ids_b[] = { U "-1" };
        struct gs_recon_snapshot *none;
        struct gs_allocation *a, *b;
        struct gs_agent ag;
        uint64_t now = 1000000;
        struct rlimit old, low;
        int fds[256], nfds = 0, fd;
        char path[300];

        agent_init(&ag, dir);
        snprintf(path, sizeof(path), "%s/%s", dir, GS_CLAIMS_NAME);
        write_file(path, HEADER LINE_A, strlen(HEADER LINE_A));
        a = alloc(&ag, "aaaaaaaaaaaaaaaa", ids_a, 1, now - 100);
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
        ck_assert_uint_eq(gs_recon_apply(&ag, none, 5000, now, 2000), 0);
        ck_assert_uint_eq(gs_recon_apply(&ag, none, 60000, now + 60, 2000), 0);
        while (nfds)
                close(fds[--nfds]);
        ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &old), 0);
        ck_assert(has_alloc(&ag, a));
        ck_assert(has_alloc(&ag, b));

        /* fds again: the claims read, a is spared, b (unheld since 5000)
         * goes. */
        ck_assert_uint_eq(gs_recon_apply(&ag, none, 61000, now + 61, 2000), 1);
        ck_assert(has_alloc(&ag, a));
        ck_assert(!has_alloc(&ag, b));

        claims_done(&ag, none, dir, path, sizeof(path));
}
END_TEST

/* Lines that are not claims survive a save byte for byte (a NUL and all),
 * and an allocation whose id one holds is never reclaimed. */
START_TEST(test_claims_malformed_kept)
{
        static const char bad[] =
                CLAIM2 " bbbbbbbbbbbbbbbb " U " zero ml garbled\n" /* holds b's id */
                "not a claim\0 at all\n"
                "   \n";
        char dir[] = "/tmp/gsreconXXXXXX";
        const char *ids_a[] = { U "-0" }, *ids_b[] = { U "-1" }, *ids_c[] = { U "-2" };
        char file[4096], want[4096], err[512] = "", path[300];
        struct gs_recon_snapshot *none;
        struct gs_allocation *a, *b, *c;
        struct gs_agent ag;
        uint64_t now = 1000000;
        size_t n, wn;

        agent_init(&ag, dir);
        snprintf(path, sizeof(path), "%s/%s", dir, GS_CLAIMS_NAME);
        n = (size_t)snprintf(file, sizeof(file), "%s%s", HEADER, LINE_A);
        memcpy(file + n, bad, sizeof(bad) - 1);
        write_file(path, file, n + sizeof(bad) - 1);
        a = alloc(&ag, "aaaaaaaaaaaaaaaa", ids_a, 1, now - 100);
        b = alloc(&ag, "bbbbbbbbbbbbbbbb", ids_b, 1, now - 100);
        c = alloc(&ag, "cccccccccccccccc", ids_c, 1, now - 100);
        none = snap(NULL, 0);

        ck_assert_uint_eq(gs_recon_apply(&ag, none, 5000, now, 2000), 0);
        ck_assert_uint_eq(gs_recon_apply(&ag, none, 60000, now + 60, 2000), 1);
        ck_assert(has_alloc(&ag, a));
        ck_assert(has_alloc(&ag, b));
        ck_assert(!has_alloc(&ag, c));
        ck_assert_ptr_null(gs_claims_of(&ag, b));
        ck_assert_int_eq(gs_claims_may_own(&ag, b), 1);

        /* A save (the release of claim 1) keeps the lines as they were. */
        ck_assert_int_eq(gs_claims_release(&ag, CLAIM1, err, sizeof(err)), 0);
        ck_assert(!has_alloc(&ag, a));
        wn = (size_t)snprintf(want, sizeof(want), "%s", HEADER);
        memcpy(want + wn, bad, sizeof(bad) - 1);
        wn += sizeof(bad) - 1;
        n = read_all(path, file, sizeof(file));
        ck_assert_uint_eq(n, wn);
        ck_assert(memcmp(file, want, wn) == 0);

        /* And a restarted agent still spares b. */
        gs_claims_free(&ag);
        ck_assert_uint_eq(gs_recon_apply(&ag, none, 90000, now + 90, 2000), 0);
        ck_assert(has_alloc(&ag, b));

        claims_done(&ag, none, dir, path, sizeof(path));
}
END_TEST

/* Memory stays bounded: a file past the bounds (too many lines that are
 * not claims, a line too long) is not read into memory but refused whole,
 * as unreadable: nothing reclaimed, the file left as it is. */
START_TEST(test_claims_bounds)
{
        char dir[] = "/tmp/gsreconXXXXXX";
        const char *ids_a[] = { U "-0" };
        struct gs_recon_snapshot *none;
        struct gs_allocation *a;
        struct gs_agent ag;
        uint64_t now = 1000000;
        size_t cap = 1u << 20, n = 0;
        char *file = malloc(cap), *back = malloc(cap), path[300];

        ck_assert_ptr_nonnull(file);
        ck_assert_ptr_nonnull(back);
        agent_init(&ag, dir);
        snprintf(path, sizeof(path), "%s/%s", dir, GS_CLAIMS_NAME);
        a = alloc(&ag, "aaaaaaaaaaaaaaaa", ids_a, 1, now - 100);
        none = snap(NULL, 0);

        for (unsigned i = 0; i <= GS_CLAIMS_KEPT_MAX; i++)
                n += (size_t)snprintf(file + n, cap - n, "bad line %u\n", i);
        write_file(path, file, n);
        ck_assert_uint_eq(gs_recon_apply(&ag, none, 5000, now, 2000), 0);
        ck_assert_uint_eq(gs_recon_apply(&ag, none, 60000, now + 60, 2000), 0);
        assert_claims_refused(&ag, path, -EFBIG);
        ck_assert_uint_eq(read_all(path, back, cap), n);
        ck_assert(memcmp(file, back, n) == 0);

        memset(file, 'x', GS_CLAIMS_LINE_MAX + 1);
        file[GS_CLAIMS_LINE_MAX + 1] = '\n';
        write_file(path, file, GS_CLAIMS_LINE_MAX + 2);
        ck_assert_uint_eq(gs_recon_apply(&ag, none, 61000, now + 61, 2000), 0);
        assert_claims_refused(&ag, path, -EFBIG);
        ck_assert(has_alloc(&ag, a));

        /* At the bounds it reads (the line without its newline, at the end
         * of the file). */
        write_file(path, file, GS_CLAIMS_LINE_MAX);
        ck_assert_uint_eq(gs_recon_apply(&ag, none, 62000, now + 62, 2000), 1);

        claims_done(&ag, none, dir, path, sizeof(path));
        free(file);
        free(back);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("recon");
        TCase *t = tcase_create("recon");

        tcase_add_test(t, test_snapshot_refuses_too_many);
        tcase_add_test(t, test_apply);
        tcase_add_test(t, test_claims_unreadable);
        tcase_add_test(t, test_claims_emfile);
        tcase_add_test(t, test_claims_malformed_kept);
        tcase_add_test(t, test_claims_bounds);
        suite_add_tcase(s, t);
        return gs_check_run(s);
}

/* check_recon.c — the reconciler's two halves without a kubelet
 * (gs_recon.h): a PodResources List reply made into a snapshot, and a
 * snapshot applied to the agent's allocations (who holds what; reclaim
 * only after the grace, and never on a partial hold). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

int main(void)
{
        Suite *s = suite_create("recon");
        TCase *t = tcase_create("recon");

        tcase_add_test(t, test_snapshot_refuses_too_many);
        tcase_add_test(t, test_apply);
        suite_add_tcase(s, t);
        return gs_check_run(s);
}

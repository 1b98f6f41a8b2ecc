/* gs_podburst.c — see gs_podburst.h. */
#include "gs_podburst.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gs_json.h"
#include "gs_k8sname.h"
#include "gs_kapi.h"

struct entry {
        char ns[64];
        char name[254];
        uint64_t burst;
        struct gs_qos_policy qos;
        int64_t at_ms; /* 0: empty */
};

struct gs_podburst {
        struct gs_kapi api;
        int64_t lc_priority; /* computeLatencyPriority */
        struct entry cache[GS_PODBURST_CACHE];
        uint32_t next; /* the slot replaced next when none is free */
};

int gs_podburst_new(const struct gs_config *c, struct gs_podburst **ret, char *err, size_t errlen)
{
        struct gs_podburst *pb;
        int r;

        *ret = NULL;
        pb = calloc(1, sizeof(*pb));
        if (!pb) {
                snprintf(err, errlen, "out of memory");
                return -ENOMEM;
        }
        r = gs_kapi_init(&pb->api, c, "gshare-agent", err, errlen);
        if (r < 0 || !pb->api.base[0]) {
                free(pb);
                return r < 0 ? r : 0;
        }
        pb->lc_priority = c->compute_latency_priority;
        *ret = pb;
        return 0;
}

void gs_podburst_free(struct gs_podburst *pb)
{
        free(pb);
}

int gs_podburst_parse(const char *json, size_t len, uint64_t *ret, char *err, size_t errlen)
{
        char kind[32], val[64];
        struct gs_json_want w[] = {
                { "kind", kind, sizeof(kind), false },
                { "metadata.annotations." GS_PODBURST_ANNOTATION, val, sizeof(val), false },
        };

        *ret = 0;
        if (gs_json_extract(json, len, w, 2) < 0 || !w[0].found || strcmp(kind, "Pod") != 0) {
                snprintf(err, errlen, "the API server's answer is not a Pod");
                return -EINVAL;
        }
        if (!w[1].found)
                return 0;
        if (gs_parse_size(val, ret) < 0 || *ret == 0) {
                snprintf(err, errlen, "annotation %s: '%.40s' is not a size (e.g. 40Gi)", GS_PODBURST_ANNOTATION, val);
                *ret = 0;
                return -EINVAL;
        }
        return 0;
}

int gs_podburst_parse_qos(const char *json, size_t len, int64_t lc_priority, struct gs_qos_policy *ret, char *err,
                          size_t errlen)
{
        char prio[32], cls[64], cap[16], weight[32];
        struct gs_json_want w[] = {
                { "spec.priority", prio, sizeof(prio), false },
                { "metadata.annotations." GS_QOS_ANN_CLASS, cls, sizeof(cls), false },
                { "metadata.annotations." GS_QOS_ANN_CAP, cap, sizeof(cap), false },
                { "metadata.annotations." GS_QOS_ANN_WEIGHT, weight, sizeof(weight), false },
        };
        struct gs_qos_pod pod = { 0 };
        char *end;

        if (gs_json_extract(json, len, w, GS_ARRAY_SIZE(w)) < 0) {
                *ret = (struct gs_qos_policy){ 0 };
                snprintf(err, errlen, "the API server's answer is not a Pod");
                return -EINVAL;
        }
        if (w[0].found) {
                errno = 0;
                pod.priority = strtoll(prio, &end, 10);
                pod.has_priority = errno == 0 && end != prio && !*end;
        }
        pod.cls = w[1].found ? cls : NULL;
        pod.cap = w[2].found ? cap : NULL;
        pod.weight = w[3].found ? weight : NULL;
        return gs_qos_from_pod(&pod, lc_priority, ret, err, errlen);
}

int gs_podburst_get(struct gs_podburst *pb, const char *ns, const char *name, uint64_t *ret, char *err, size_t errlen)
{
        struct gs_podinfo info;
        int r = gs_podburst_pod(pb, ns, name, &info, err, errlen);

        *ret = info.burst;
        return r;
}

int gs_podburst_pod(struct gs_podburst *pb, const char *ns, const char *name, struct gs_podinfo *info, char *err,
                    size_t errlen)
{
        uint64_t *ret = &info->burst;
        int64_t now = gs_mono_ms();
        struct entry *e = NULL;
        char path[512], *body = NULL;
        size_t len = 0;
        long code = 0;
        int r;

        memset(info, 0, sizeof(*info));
        if (!gs_k8s_label_ok(ns) || !gs_k8s_subdomain_ok(name)) {
                snprintf(err, errlen, "pod %.64s/%.64s: not a namespace and name", ns, name);
                return -EINVAL;
        }
        for (uint32_t i = 0; i < GS_PODBURST_CACHE; i++) {
                struct entry *c = &pb->cache[i];
                if (c->at_ms && now - c->at_ms < GS_PODBURST_TTL_MS && strcmp(c->ns, ns) == 0 &&
                    strcmp(c->name, name) == 0) {
                        *ret = c->burst;
                        info->qos = c->qos;
                        return 0;
                }
                if (!e && (!c->at_ms || now - c->at_ms >= GS_PODBURST_TTL_MS))
                        e = c;
        }
        snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s", ns, name);
        r = gs_kapi_request(&pb->api, "GET", path, NULL, NULL, GS_PODBURST_MAX_REPLY, &code, &body, &len, err, errlen);
        if (r < 0)
                return r;
        if (code != 200) {
                snprintf(err, errlen, "GET %s: HTTP %ld", path, code);
                free(body);
                return code == 404 ? -ENOENT : -EIO;
        }
        r = gs_podburst_parse(body, len, ret, err, errlen);
        if (gs_podburst_parse_qos(body, len, pb->lc_priority, &info->qos, info->qos_err, sizeof(info->qos_err)) < 0 &&
            !info->qos_err[0])
                snprintf(info->qos_err, sizeof(info->qos_err), "the compute policy is unreadable");
        free(body);
        if (r < 0 && r != -EINVAL)
                return r;
        /* A bad value is kept too (as no burst): said once a TTL, not at
         * every List. */
        if (!e) {
                e = &pb->cache[pb->next];
                pb->next = (pb->next + 1) % GS_PODBURST_CACHE;
        }
        snprintf(e->ns, sizeof(e->ns), "%s", ns);
        snprintf(e->name, sizeof(e->name), "%s", name);
        e->burst = *ret;
        e->qos = info->qos;
        e->at_ms = now;
        return r;
}

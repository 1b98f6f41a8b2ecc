/* gs_event.c — see gs_event.h. */
#include "gs_event.h"

#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gs_log.h"
#include "gs_k8sname.h"
#include "gs_kapi.h"

#define MSG_CAP 512
#define BODY_CAP 2048
#define POST_TIMEOUT_MS 10000L

#define OBJ(it) ((it)->obj == GS_EVENT_CLAIM ? "claim" : "pod")

struct item {
        enum gs_event_type type;
        enum gs_event_obj obj;
        char ns[64], name[254], uid[40], reason[64], message[MSG_CAP];
};

struct gs_events {
        pthread_t thr;
        pthread_mutex_t mu;
        pthread_cond_t cv;
        bool stop;
        struct item q[GS_EVENT_QUEUE];
        unsigned head, n;
        char base[GS_CONFIG_API_SERVER_MAX];
        char node[GS_CONFIG_NODE_NAME_MAX];
        char token_file[PATH_MAX];
        char ca_file[PATH_MAX];
};

/* s as a JSON string body (quotes, backslashes and controls escaped). */
static int jesc(char *out, size_t cap, const char *s)
{
        size_t o = 0;

        for (; *s; s++) {
                unsigned char c = (unsigned char)*s;
                if (o + 7 >= cap)
                        return -ENOSPC;
                if (c == '"' || c == '\\') {
                        out[o++] = '\\';
                        out[o++] = (char)c;
                } else if (c < 0x20) {
                        o += (size_t)snprintf(out + o, cap - o, "\\u%04x", c);
                } else {
                        out[o++] = (char)c;
                }
        }
        out[o] = '\0';
        return 0;
}

int gs_event_json(char *buf, size_t cap, enum gs_event_type type, enum gs_event_obj obj, const char *ns,
                  const char *name, const char *uid, const char *reason, const char *message, const char *node,
                  int64_t unix_s)
{
        char msg[2 * MSG_CAP], ts[32];
        time_t t = (time_t)unix_s;
        struct tm tm;
        int n;

        if (jesc(msg, sizeof(msg), message) < 0)
                return -ENOSPC;
        gmtime_r(&t, &tm);
        strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%SZ", &tm);
        n = snprintf(buf, cap,
                     "{\"apiVersion\":\"v1\",\"kind\":\"Event\","
                     "\"metadata\":{\"generateName\":\"gshare-\",\"namespace\":\"%s\"},"
                     "\"involvedObject\":{\"apiVersion\":\"%s\",\"kind\":\"%s\",\"namespace\":\"%s\","
                     "\"name\":\"%s\"%s%s%s},"
                     "\"reason\":\"%s\",\"message\":\"%s\",\"type\":\"%s\","
                     "\"source\":{\"component\":\"gshare-agent\",\"host\":\"%s\"},"
                     "\"reportingComponent\":\"gshare-agent\",\"reportingInstance\":\"%s\","
                     "\"firstTimestamp\":\"%s\",\"lastTimestamp\":\"%s\",\"count\":1}",
                     ns, obj == GS_EVENT_CLAIM ? "resource.k8s.io/v1" : "v1",
                     obj == GS_EVENT_CLAIM ? "ResourceClaim" : "Pod", ns, name, uid[0] ? ",\"uid\":\"" : "", uid,
                     uid[0] ? "\"" : "", reason, msg, type == GS_EVENT_NORMAL ? "Normal" : "Warning", node, node, ts,
                     ts);
        return n < 0 || (size_t)n >= cap ? -ENOSPC : n;
}

static size_t sink(char *data, size_t size, size_t nmemb, void *arg)
{
        (void)data;
        (void)arg;
        return size * nmemb;
}

static int post(struct gs_events *ev, const struct item *it)
{
        char url[GS_CONFIG_API_SERVER_MAX + 160], body[BODY_CAP], err[512];
        struct gs_kapi_req q;
        CURL *easy;
        long code = 0;
        CURLcode cr;
        int r;

        r = gs_event_json(body, sizeof(body), it->type, it->obj, it->ns, it->name, it->uid, it->reason, it->message,
                          ev->node, (int64_t)time(NULL));
        if (r < 0)
                return r;
        snprintf(url, sizeof(url), "%s/api/v1/namespaces/%s/events", ev->base, it->ns);
        r = gs_kapi_req_new(&q, url, ev->token_file, ev->ca_file, "application/json", err, sizeof(err));
        if (r < 0) {
                log_warn("Event on %s %s/%s not posted: %s", OBJ(it), it->ns, it->name, err);
                return r;
        }
        easy = q.easy;
        curl_easy_setopt(easy, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, POST_TIMEOUT_MS);
        curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, sink);
        cr = curl_easy_perform(easy);
        if (cr == CURLE_OK)
                curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &code);
        if (cr != CURLE_OK || code < 200 || code > 299) {
                log_warn("Event on %s %s/%s not posted: %s", OBJ(it), it->ns, it->name,
                         cr != CURLE_OK ? (q.errbuf[0] ? q.errbuf : curl_easy_strerror(cr)) : "HTTP error");
                if (code)
                        log_warn("Event on %s %s/%s: HTTP %ld", OBJ(it), it->ns, it->name, code);
                r = -EIO;
        }
        gs_kapi_req_free(&q);
        return r;
}

static void *thread_main(void *arg)
{
        struct gs_events *ev = arg;

        pthread_mutex_lock(&ev->mu);
        for (;;) {
                struct item it;

                while (!ev->stop && ev->n == 0)
                        pthread_cond_wait(&ev->cv, &ev->mu);
                if (ev->stop)
                        break;
                it = ev->q[ev->head];
                ev->head = (ev->head + 1) % GS_EVENT_QUEUE;
                ev->n--;
                pthread_mutex_unlock(&ev->mu);
                (void)post(ev, &it); /* a failure is logged there */
                pthread_mutex_lock(&ev->mu);
        }
        pthread_mutex_unlock(&ev->mu);
        return NULL;
}

int gs_events_start(const struct gs_config *c, struct gs_events **ret, char *err, size_t errlen)
{
        struct gs_events *ev;
        const char *node = c->node_name[0] ? c->node_name : secure_getenv("NODE_NAME");
        char base[GS_CONFIG_API_SERVER_MAX];
        int r;

        *ret = NULL;
        r = gs_kapi_base_url(c, base, sizeof(base), err, errlen);
        if (r < 0 || !base[0] || !node || !node[0] || strlen(node) >= GS_CONFIG_NODE_NAME_MAX)
                return r < 0 ? r : 0;
        ev = calloc(1, sizeof(*ev));
        if (!ev) {
                snprintf(err, errlen, "out of memory");
                return -ENOMEM;
        }
        snprintf(ev->base, sizeof(ev->base), "%s", base);
        snprintf(ev->node, sizeof(ev->node), "%s", node);
        snprintf(ev->token_file, sizeof(ev->token_file), "%s", c->api_token_file);
        snprintf(ev->ca_file, sizeof(ev->ca_file), "%s", c->api_ca_file);
        pthread_mutex_init(&ev->mu, NULL);
        pthread_cond_init(&ev->cv, NULL);
        r = pthread_create(&ev->thr, NULL, thread_main, ev);
        if (r) {
                snprintf(err, errlen, "cannot start the Event thread: %s", strerror(r));
                pthread_cond_destroy(&ev->cv);
                pthread_mutex_destroy(&ev->mu);
                free(ev);
                return -r;
        }
        *ret = ev;
        return 0;
}

void gs_events_stop(struct gs_events *ev)
{
        if (!ev)
                return;
        pthread_mutex_lock(&ev->mu);
        ev->stop = true;
        pthread_cond_signal(&ev->cv);
        pthread_mutex_unlock(&ev->mu);
        pthread_join(ev->thr, NULL);
        pthread_cond_destroy(&ev->cv);
        pthread_mutex_destroy(&ev->mu);
        free(ev);
}

int gs_events_post(struct gs_events *ev, enum gs_event_type type, enum gs_event_obj obj, const char *ns,
                   const char *name, const char *uid, const char *reason, const char *message)
{
        struct item *it;

        if (!ev || !gs_k8s_label_ok(ns) || !gs_k8s_subdomain_ok(name) || strlen(uid) >= sizeof(it->uid) ||
            strspn(uid, "0123456789abcdef-") != strlen(uid) || !reason[0] || strlen(reason) >= sizeof(it->reason) ||
            strspn(reason, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789") != strlen(reason))
                return -EINVAL;
        pthread_mutex_lock(&ev->mu);
        if (ev->n == GS_EVENT_QUEUE) {
                pthread_mutex_unlock(&ev->mu);
                return -EAGAIN;
        }
        it = &ev->q[(ev->head + ev->n) % GS_EVENT_QUEUE];
        it->type = type;
        it->obj = obj;
        snprintf(it->ns, sizeof(it->ns), "%s", ns);
        snprintf(it->name, sizeof(it->name), "%s", name);
        snprintf(it->uid, sizeof(it->uid), "%s", uid);
        snprintf(it->reason, sizeof(it->reason), "%s", reason);
        snprintf(it->message, sizeof(it->message), "%s", message);
        ev->n++;
        pthread_cond_signal(&ev->cv);
        pthread_mutex_unlock(&ev->mu);
        return 0;
}

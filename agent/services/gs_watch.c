/* gs_watch.c — see gs_watch.h.
 *
 * Threads: the watch's thread owns everything in struct gs_watch but the
 * stop flag, and touches nothing of the agent's but gs_recon_kick (which is
 * thread-safe).  Every wait is a curl_multi_poll on w->multi, so that
 * gs_watch_stop's curl_multi_wakeup ends it at once, in a transfer or in a
 * backoff. */
#include "gs_watch.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#include "gs_json.h"
#include "gs_k8sname.h"
#include "gs_kapi.h"
#include "gs_log.h"
#include "gs_recon.h"

#define ERRBODY_MAX 4096u
#define CONNECT_TIMEOUT_MS 10000L
#define LIST_TIMEOUT_MS 30000L
/* The server ends a watch after this; our own limit is a little longer, and
 * a connection silent for LOW_SPEED_S (bookmarks come about once a minute)
 * is taken for dead. */
#define WATCH_SERVER_TIMEOUT_S 300
#define WATCH_TIMEOUT_MS ((WATCH_SERVER_TIMEOUT_S + 30) * 1000L)
#define LOW_SPEED_S 120L
/* A stream that ran this long, or delivered an event, was a good one:
 * reconnect at once and reset the backoff. */
#define STREAM_LIVED_MS 10000
/* After the grace, one more List: the reconciler releases only what it has
 * seen unheld for reclaimGrace, and would otherwise wait an interval. */
#define REKICK_SLACK_MS 1000
/* Bad lines logged per connection (then silently skipped). */
#define BAD_LINES_LOGGED 10u

struct gs_watch {
        struct gs_recon *rc;
        char base[GS_CONFIG_API_SERVER_MAX];
        char node[GS_CONFIG_NODE_NAME_MAX];
        char token_file[PATH_MAX];
        char ca_file[PATH_MAX];
        uint32_t grace_ms;
        CURLM *multi;
        pthread_t thread;
        bool thread_started;
        atomic_bool stop;
        /* the thread's */
        char rv[128];
        int64_t rekick_ms, last_kick_ms; /* 0: none */
        char err[512];
};

enum outcome { OUT_NONE = 0, OUT_RELIST, OUT_ERROR };

struct xfer {
        struct gs_watch *w;
        CURL *easy;
        bool watch; /* else the list */
        long status;
        char *buf; /* current line (watch, status 200) or body */
        size_t len, cap;
        bool skipping; /* an oversized line: dropped up to its newline */
        unsigned events, bad;
        enum outcome outcome;
};

/* For logs: the server's bytes, printable and cut short. */
static void printable(char *dst, size_t cap, const char *src, size_t len)
{
        size_t n = 0;

        for (size_t i = 0; i < len && n + 1 < cap; i++)
                dst[n++] = (src[i] >= 0x20 && src[i] < 0x7f) ? src[i] : '?';
        if (cap)
                dst[n] = '\0';
}

int gs_watch_parse_event(const char *line, size_t len, struct gs_watch_event *ev)
{
        struct gs_json_want w[] = {
                { "type", ev->type, sizeof(ev->type), false },
                { "object.metadata.resourceVersion", ev->rv, sizeof(ev->rv), false },
                { "object.status.phase", ev->phase, sizeof(ev->phase), false },
                { "object.metadata.name", ev->name, sizeof(ev->name), false },
                { "object.code", ev->code, sizeof(ev->code), false },
        };
        int r = gs_json_extract(line, len, w, GS_ARRAY_SIZE(w));

        if (r < 0)
                return r;
        return w[0].found && ev->type[0] ? 0 : -EINVAL;
}

int gs_watch_parse_list_rv(const char *body, size_t len, char *rv, size_t cap)
{
        struct gs_json_want w[] = { { "metadata.resourceVersion", rv, cap, false } };
        int r = gs_json_extract(body, len, w, 1);

        if (r < 0)
                return r;
        return w[0].found && rv[0] ? 0 : -EINVAL;
}

/* ---- kicking the reconciler ---- */

static void kick(struct gs_watch *w)
{
        int64_t now = gs_mono_ms();

        gs_recon_kick(w->rc);
        w->last_kick_ms = now;
        if (!w->rekick_ms)
                w->rekick_ms = now + w->grace_ms + REKICK_SLACK_MS;
}

/* The follow-up List a grace after a kick; kicks meanwhile get theirs. */
static void maybe_rekick(struct gs_watch *w)
{
        int64_t now = gs_mono_ms();

        if (!w->rekick_ms || now < w->rekick_ms)
                return;
        gs_recon_kick(w->rc);
        w->rekick_ms = 0;
        if (w->last_kick_ms + w->grace_ms + REKICK_SLACK_MS > now)
                w->rekick_ms = w->last_kick_ms + w->grace_ms + REKICK_SLACK_MS;
}

static int poll_ms(const struct gs_watch *w, int64_t until)
{
        int64_t now = gs_mono_ms(), t = 1000;

        if (until && until - now < t)
                t = until - now;
        if (w->rekick_ms && w->rekick_ms - now < t)
                t = w->rekick_ms - now;
        return t < 0 ? 0 : (int)t;
}

static void nap(struct gs_watch *w, int64_t ms)
{
        int64_t until = gs_mono_ms() + ms;

        while (!atomic_load(&w->stop) && gs_mono_ms() < until) {
                maybe_rekick(w);
                (void)curl_multi_poll(w->multi, NULL, 0, poll_ms(w, until), NULL);
        }
}

/* ---- one line of the stream ---- */

static bool valid_rv(const char *s)
{
        if (!*s)
                return false;
        for (; *s; s++)
                if (!isalnum((unsigned char)*s) && *s != '-' && *s != '_' && *s != '.')
                        return false;
        return true;
}

static void handle_line(struct xfer *x, const char *line, size_t len)
{
        struct gs_watch *w = x->w;
        struct gs_watch_event ev;
        char shown[128], name[64];
        size_t i;

        for (i = 0; i < len && isspace((unsigned char)line[i]); i++)
                ;
        if (i == len)
                return;
        if (gs_watch_parse_event(line, len, &ev) < 0) {
                printable(shown, sizeof(shown), line, len < 80 ? len : 80);
                if (x->bad++ < BAD_LINES_LOGGED)
                        log_warn("pod watch: ignoring a line that is not a watch event (%zu bytes: %s%s)", len, shown,
                                 len > 80 ? "..." : "");
                return;
        }
        printable(name, sizeof(name), ev.name, strlen(ev.name));
        if (strcmp(ev.type, "ERROR") == 0) {
                if (strcmp(ev.code, "410") == 0) {
                        log_info("pod watch: resourceVersion %s is gone (410): listing again", w->rv);
                        x->outcome = OUT_RELIST;
                } else {
                        snprintf(w->err, sizeof(w->err), "the watch ended with an ERROR event (code %s)",
                                 ev.code[0] ? ev.code : "none");
                        x->outcome = OUT_ERROR;
                }
                return;
        }
        if (strcmp(ev.type, "ADDED") && strcmp(ev.type, "MODIFIED") && strcmp(ev.type, "DELETED") &&
            strcmp(ev.type, "BOOKMARK")) {
                printable(shown, sizeof(shown), ev.type, strlen(ev.type));
                if (x->bad++ < BAD_LINES_LOGGED)
                        log_warn("pod watch: ignoring an event of unknown type '%s'", shown);
                return;
        }
        x->events++;
        if (valid_rv(ev.rv))
                snprintf(w->rv, sizeof(w->rv), "%s", ev.rv);
        if (strcmp(ev.type, "DELETED") == 0) {
                log_info("pod watch: pod %s deleted: reconciling now", name);
                kick(w);
        } else if (strcmp(ev.type, "BOOKMARK") != 0 &&
                   (strcmp(ev.phase, "Succeeded") == 0 || strcmp(ev.phase, "Failed") == 0)) {
                log_info("pod watch: pod %s %s: reconciling now", name, ev.phase);
                kick(w);
        }
}

/* ---- HTTP ---- */

static int grow(struct xfer *x, size_t need, size_t limit)
{
        size_t cap = x->cap ? x->cap : 16384;
        char *nb;

        if (need <= x->cap)
                return 0;
        while (cap < need)
                cap *= 2;
        if (cap > limit)
                cap = limit;
        nb = realloc(x->buf, cap);
        if (!nb)
                return -ENOMEM;
        x->buf = nb;
        x->cap = cap;
        return 0;
}

static size_t on_data(char *data, size_t size, size_t nmemb, void *arg)
{
        struct xfer *x = arg;
        size_t n = size * nmemb, off = 0;

        if (x->status == 0)
                (void)curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &x->status);
        if (!x->watch || x->status != 200) {
                /* A list body (bounded), or an error's body (its start kept). */
                size_t limit = x->status == 200 ? GS_WATCH_MAX_LIST : ERRBODY_MAX, take = n;
                if (x->len + take > limit) {
                        if (x->status == 200)
                                return 0; /* too large to trust: abort */
                        take = limit - x->len;
                }
                if (grow(x, x->len + take, limit) < 0)
                        return 0;
                memcpy(x->buf + x->len, data, take);
                x->len += take;
                return n;
        }
        while (off < n) {
                const char *nl = memchr(data + off, '\n', n - off);
                size_t take = nl ? (size_t)(nl - (data + off)) : n - off;

                if (!x->skipping) {
                        if (x->len + take > GS_WATCH_MAX_LINE) {
                                log_warn("pod watch: ignoring a line longer than %u bytes", GS_WATCH_MAX_LINE);
                                x->skipping = true;
                                x->len = 0;
                        } else {
                                if (grow(x, x->len + take, GS_WATCH_MAX_LINE) < 0)
                                        return 0;
                                memcpy(x->buf + x->len, data + off, take);
                                x->len += take;
                        }
                }
                off += take;
                if (nl) {
                        off++;
                        if (!x->skipping)
                                handle_line(x, x->buf, x->len);
                        x->skipping = false;
                        x->len = 0;
                        if (x->outcome != OUT_NONE)
                                return 0; /* ends the transfer */
                }
        }
        return n;
}

/* One GET; the outcome in x.  Returns 0 when the transfer ran (whatever its
 * HTTP status), -ECANCELED on stop, or a negative errno with w->err set. */
static int get(struct gs_watch *w, const char *url, struct xfer *x)
{
        struct gs_kapi_req q;
        CURLcode res = CURLE_OK;
        bool done = false;
        int running = 1, r = 0;

        r = gs_kapi_req_new(&q, url, w->token_file, w->ca_file, NULL, w->err, sizeof(w->err));
        if (r < 0)
                return r;
        x->easy = q.easy;
        curl_easy_setopt(x->easy, CURLOPT_CONNECTTIMEOUT_MS, CONNECT_TIMEOUT_MS);
        curl_easy_setopt(x->easy, CURLOPT_TCP_KEEPALIVE, 1L);
        curl_easy_setopt(x->easy, CURLOPT_TCP_KEEPIDLE, 30L);
        curl_easy_setopt(x->easy, CURLOPT_TCP_KEEPINTVL, 10L);
        curl_easy_setopt(x->easy, CURLOPT_WRITEFUNCTION, on_data);
        curl_easy_setopt(x->easy, CURLOPT_WRITEDATA, x);
        if (x->watch) {
                curl_easy_setopt(x->easy, CURLOPT_TIMEOUT_MS, WATCH_TIMEOUT_MS);
                curl_easy_setopt(x->easy, CURLOPT_LOW_SPEED_LIMIT, 1L);
                curl_easy_setopt(x->easy, CURLOPT_LOW_SPEED_TIME, LOW_SPEED_S);
        } else {
                curl_easy_setopt(x->easy, CURLOPT_TIMEOUT_MS, LIST_TIMEOUT_MS);
        }
        if (curl_multi_add_handle(w->multi, x->easy) != CURLM_OK) {
                snprintf(w->err, sizeof(w->err), "curl_multi_add_handle failed");
                r = -ENOMEM;
                goto out;
        }
        while (!atomic_load(&w->stop)) {
                CURLMsg *m;
                int nq;

                if (curl_multi_perform(w->multi, &running) != CURLM_OK)
                        break;
                while ((m = curl_multi_info_read(w->multi, &nq)))
                        if (m->msg == CURLMSG_DONE && m->easy_handle == x->easy) {
                                res = m->data.result;
                                done = true;
                        }
                if (done || !running)
                        break;
                maybe_rekick(w);
                (void)curl_multi_poll(w->multi, NULL, 0, poll_ms(w, 0), NULL);
        }
        (void)curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &x->status);
        curl_multi_remove_handle(w->multi, x->easy);
        if (atomic_load(&w->stop)) {
                r = -ECANCELED;
        } else if (!done) {
                snprintf(w->err, sizeof(w->err), "GET %.300s: libcurl failed", url);
                r = -EIO;
        } else if (res != CURLE_OK && x->outcome == OUT_NONE && x->status != 200) {
                snprintf(w->err, sizeof(w->err), "GET %.240s: %s", url,
                         q.errbuf[0] ? q.errbuf : curl_easy_strerror(res));
                r = -EIO;
        } else if (res != CURLE_OK && x->outcome == OUT_NONE) {
                /* A 200 stream cut short: how, for the log. */
                snprintf(w->err, sizeof(w->err), "GET %.240s: %s", url,
                         q.errbuf[0] ? q.errbuf : curl_easy_strerror(res));
        }
out:
        gs_kapi_req_free(&q);
        x->easy = NULL;
        return r;
}

static int http_error(struct gs_watch *w, const struct xfer *x, const char *what)
{
        char body[200];

        printable(body, sizeof(body), x->buf ? x->buf : "", x->len);
        snprintf(w->err, sizeof(w->err), "%s: HTTP %ld: %s", what, x->status, body);
        return x->status == 401 || x->status == 403 ? -EACCES : -EIO;
}

/* Lists the node's pods for a resourceVersion to watch from. */
static int do_list(struct gs_watch *w)
{
        struct xfer x = { .w = w, .watch = false };
        char url[GS_CONFIG_API_SERVER_MAX + 2 * GS_CONFIG_NODE_NAME_MAX + 128], rv[sizeof(w->rv)];
        int r;

        snprintf(url, sizeof(url), "%s/api/v1/pods?fieldSelector=spec.nodeName%%3D%s&limit=1", w->base, w->node);
        r = get(w, url, &x);
        if (r < 0)
                goto out;
        if (x.status != 200) {
                r = http_error(w, &x, "listing pods");
                goto out;
        }
        if (w->err[0] && x.len == 0) {
                r = -EIO;
                goto out;
        }
        if (gs_watch_parse_list_rv(x.buf ? x.buf : "", x.len, rv, sizeof(rv)) < 0 || !valid_rv(rv)) {
                snprintf(w->err, sizeof(w->err),
                         "listing pods: the reply (%zu bytes) has no usable metadata.resourceVersion", x.len);
                r = -EPROTO;
                goto out;
        }
        snprintf(w->rv, sizeof(w->rv), "%s", rv);
        log_debug("pod watch: listed pods of node %s at resourceVersion %s", w->node, w->rv);
        /* Pods may have ended while we were not watching. */
        kick(w);
out:
        free(x.buf);
        return r;
}

/* Watches from w->rv.  Returns 0 when a good stream ended (reconnect),
 * -ESTALE to list again, or a negative errno with w->err set. */
static int do_watch(struct gs_watch *w)
{
        struct xfer x = { .w = w, .watch = true };
        char url[GS_CONFIG_API_SERVER_MAX + 2 * GS_CONFIG_NODE_NAME_MAX + 256];
        int64_t t0 = gs_mono_ms();
        bool lived;
        int r;

        snprintf(url, sizeof(url),
                 "%s/api/v1/pods?fieldSelector=spec.nodeName%%3D%s&watch=1&allowWatchBookmarks=true"
                 "&timeoutSeconds=%d&resourceVersion=%s",
                 w->base, w->node, WATCH_SERVER_TIMEOUT_S, w->rv);
        log_debug("pod watch: watching from resourceVersion %s", w->rv);
        w->err[0] = '\0';
        r = get(w, url, &x);
        lived = x.events > 0 || gs_mono_ms() - t0 >= STREAM_LIVED_MS;
        if (r < 0)
                goto out;
        if (x.status == 410 || x.outcome == OUT_RELIST) {
                if (x.status == 410)
                        log_info("pod watch: resourceVersion %s is gone (HTTP 410): listing again", w->rv);
                r = lived ? -ESTALE : -ENOENT;
                if (r == -ENOENT)
                        snprintf(w->err, sizeof(w->err), "resourceVersion %s gone at once", w->rv);
                goto out;
        }
        if (x.status != 200) {
                r = http_error(w, &x, "watching pods");
                goto out;
        }
        if (x.outcome == OUT_ERROR) {
                r = -EIO;
                goto out;
        }
        if (!lived) {
                if (!w->err[0])
                        snprintf(w->err, sizeof(w->err), "the watch ended at once, without an event");
                r = -EIO;
                goto out;
        }
        log_debug("pod watch: the stream ended after %u events (%s); reconnecting", x.events,
                  w->err[0] ? w->err : "closed");
out:
        free(x.buf);
        return r;
}

static void *thread_main(void *arg)
{
        struct gs_watch *w = arg;
        int64_t backoff = GS_WATCH_BACKOFF_MIN_MS;
        bool need_list = true, failing = false;

        while (!atomic_load(&w->stop)) {
                int r;

                w->err[0] = '\0';
                if (need_list) {
                        r = do_list(w);
                        if (r == 0)
                                need_list = false;
                } else {
                        r = do_watch(w);
                        if (r == -ESTALE || r == -ENOENT)
                                need_list = true;
                }
                if (r == -ECANCELED)
                        break;
                if (r == 0 || r == -ESTALE) {
                        if (failing)
                                log_info("pod watch: the API server answers again");
                        failing = false;
                        backoff = GS_WATCH_BACKOFF_MIN_MS;
                        continue;
                }
                if (!failing)
                        log_warn("pod watch: %s; retrying with backoff (reclaim goes on at reconcileInterval)",
                                 w->err[0] ? w->err : strerror(-r));
                else
                        log_debug("pod watch: %s", w->err);
                failing = true;
                nap(w, backoff);
                backoff = backoff * 2 > GS_WATCH_BACKOFF_MAX_MS ? GS_WATCH_BACKOFF_MAX_MS : backoff * 2;
        }
        return NULL;
}

/* ---- start and stop ---- */

/* The API server's base URL from c or the service environment; "" when none. */

int gs_watch_start(const struct gs_config *c, struct gs_recon *rc, struct gs_watch **ret, char *err, size_t errlen)
{
        bool on = c->pod_watch == GS_POD_WATCH_ON;
        const char *node = c->node_name[0] ? c->node_name : secure_getenv("NODE_NAME");
        char why[256] = "";
        struct gs_watch *w = NULL;
        int r;

        *ret = NULL;
        err[0] = '\0';
        if (c->pod_watch == GS_POD_WATCH_OFF) {
                log_info("pod watch off (podWatch off): reclaim follows reconcileInterval");
                return 0;
        }
        w = calloc(1, sizeof(*w));
        if (!w)
                return -ENOMEM;
        r = gs_kapi_base_url(c, w->base, sizeof(w->base), err, errlen);
        if (r < 0)
                goto off;
        if (!rc)
                snprintf(why, sizeof(why), "the reconciler is off");
        else if (!w->base[0])
                snprintf(why, sizeof(why), "no API server (apiServer, or KUBERNETES_SERVICE_HOST and _PORT)");
        else if (!node || !*node)
                snprintf(why, sizeof(why), "no node name (nodeName, or NODE_NAME)");
        else if (!gs_k8s_subdomain_ok(node))
                snprintf(why, sizeof(why), "node name '%.64s' is not a DNS subdomain", node);
        else if (c->api_token_file[0] && access(c->api_token_file, R_OK) < 0)
                snprintf(why, sizeof(why), "cannot read the token %.150s: %s", c->api_token_file, strerror(errno));
        else if (strncmp(w->base, "https:", 6) == 0 && c->api_ca_file[0] && access(c->api_ca_file, R_OK) < 0)
                snprintf(why, sizeof(why), "cannot read the CA %.150s: %s", c->api_ca_file, strerror(errno));
        if (why[0]) {
                snprintf(err, errlen, "pod watch: %s", why);
                r = -EINVAL;
                goto off;
        }
        snprintf(w->node, sizeof(w->node), "%s", node);
        snprintf(w->token_file, sizeof(w->token_file), "%s", c->api_token_file);
        if (strncmp(w->base, "https:", 6) == 0)
                snprintf(w->ca_file, sizeof(w->ca_file), "%s", c->api_ca_file);
        w->rc = rc;
        w->grace_ms = c->reclaim_grace_ms;
        atomic_init(&w->stop, false);
        if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
                snprintf(err, errlen, "pod watch: curl_global_init failed");
                free(w);
                return -ENOMEM;
        }
        w->multi = curl_multi_init();
        if (!w->multi) {
                r = -ENOMEM;
                snprintf(err, errlen, "pod watch: curl_multi_init failed");
                goto fail;
        }
        r = -pthread_create(&w->thread, NULL, thread_main, w);
        if (r < 0) {
                snprintf(err, errlen, "pod watch: pthread_create: %s", strerror(-r));
                goto fail;
        }
        w->thread_started = true;
        log_info("pod watch: pods of node %s on %s (reconciling when one ends)", w->node, w->base);
        *ret = w;
        return 0;
fail:
        gs_watch_stop(w);
        return r;
off:
        free(w);
        if (on)
                return r;
        /* auto: off outside a cluster; say why once. */
        log_info("pod watch off (podWatch auto): %s", why[0] ? why : err);
        err[0] = '\0';
        return 0;
}

void gs_watch_stop(struct gs_watch *w)
{
        if (!w)
                return;
        if (w->thread_started) {
                atomic_store(&w->stop, true);
                curl_multi_wakeup(w->multi);
                pthread_join(w->thread, NULL);
        }
        if (w->multi)
                curl_multi_cleanup(w->multi);
        free(w);
        curl_global_cleanup();
}

/* gs_kapi.c — see gs_kapi.h. */
#include "gs_kapi.h"

#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The token, one line of printable ASCII (it goes into a header). */
int gs_kapi_read_token(const char *path, char *buf, size_t cap)
{
        size_t len = 0;
        int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY), r = 0;

        if (fd < 0)
                return gs_neg_errno();
        r = gs_read_all(fd, buf, cap, &len);
        if (r < 0)
                goto out;
        while (len && isspace((unsigned char)buf[len - 1]))
                len--;
        buf[len] = '\0';
        if (len == 0)
                r = -ENODATA;
        for (size_t i = 0; i < len; i++)
                if (buf[i] <= 0x20 || buf[i] >= 0x7f)
                        r = -EINVAL;
out:
        close(fd);
        return r;
}

/* The API server's base URL from c or the service environment; "" when none. */
int gs_kapi_base_url(const struct gs_config *c, char *buf, size_t cap, char *err, size_t errlen)
{
        const char *host = secure_getenv("KUBERNETES_SERVICE_HOST");
        const char *port = secure_getenv("KUBERNETES_SERVICE_PORT");
        size_t n;

        buf[0] = '\0';
        if (c->api_server[0]) {
                snprintf(buf, cap, "%s", c->api_server);
        } else if (host && *host && port && *port) {
                if (strspn(port, "0123456789") != strlen(port) || strlen(port) > 5 ||
                    strspn(host, "0123456789abcdefABCDEF.:-") != strlen(host)) {
                        snprintf(err, errlen,
                                 "KUBERNETES_SERVICE_HOST/PORT ('%.64s', '%.8s') are not an address and a port", host,
                                 port);
                        return -EINVAL;
                }
                if (strchr(host, ':'))
                        snprintf(buf, cap, "https://[%s]:%s", host, port);
                else
                        snprintf(buf, cap, "https://%s:%s", host, port);
        }
        n = strlen(buf);
        while (n && buf[n - 1] == '/')
                buf[--n] = '\0';
        return 0;
}

int gs_kapi_init(struct gs_kapi *k, const struct gs_config *c, const char *user_agent, char *err, size_t errlen)
{
        memset(k, 0, sizeof(*k));
        k->user_agent = user_agent;
        snprintf(k->token_file, sizeof(k->token_file), "%s", c->api_token_file);
        snprintf(k->ca_file, sizeof(k->ca_file), "%s", c->api_ca_file);
        return gs_kapi_base_url(c, k->base, sizeof(k->base), err, errlen);
}

struct reply {
        char *buf;
        size_t len, cap, max;
        bool over;
};

static size_t on_data(char *data, size_t size, size_t nmemb, void *arg)
{
        struct reply *r = arg;
        size_t n = size * nmemb;

        if (r->len + n > r->max) {
                r->over = true;
                return 0; /* ends the transfer */
        }
        if (r->len + n + 1 > r->cap) {
                size_t cap = r->cap ? r->cap : 4096;
                char *b;
                while (cap < r->len + n + 1)
                        cap *= 2;
                b = realloc(r->buf, cap);
                if (!b)
                        return 0;
                r->buf = b;
                r->cap = cap;
        }
        memcpy(r->buf + r->len, data, n);
        r->len += n;
        r->buf[r->len] = '\0';
        return n;
}

int gs_kapi_request(const struct gs_kapi *k, const char *method, const char *path, const char *content_type,
                    const char *body, size_t max_reply, long *ret_code, char **ret_body, size_t *ret_len, char *err,
                    size_t errlen)
{
        struct reply rep = { .max = max_reply };
        struct gs_kapi_req q;
        char *url = NULL;
        CURLcode cr;
        long code = 0;
        int r;

        if (!k->base[0]) {
                snprintf(err, errlen, "no API server (apiServer, KUBERNETES_SERVICE_HOST)");
                return -ENOTCONN;
        }
        if (asprintf(&url, "%s%s", k->base, path) < 0) {
                snprintf(err, errlen, "out of memory");
                return -ENOMEM;
        }
        r = gs_kapi_req_new(&q, url, k->token_file, k->ca_file, body ? content_type : NULL, err, errlen);
        free(url);
        if (r < 0)
                return r;
        curl_easy_setopt(q.easy, CURLOPT_CUSTOMREQUEST, method);
        if (body)
                curl_easy_setopt(q.easy, CURLOPT_POSTFIELDS, body);
        if (k->user_agent)
                curl_easy_setopt(q.easy, CURLOPT_USERAGENT, k->user_agent);
        curl_easy_setopt(q.easy, CURLOPT_TIMEOUT_MS, GS_KAPI_TIMEOUT_MS);
        curl_easy_setopt(q.easy, CURLOPT_WRITEFUNCTION, on_data);
        curl_easy_setopt(q.easy, CURLOPT_WRITEDATA, &rep);
        cr = curl_easy_perform(q.easy);
        if (rep.over) {
                snprintf(err, errlen, "%s %.200s: reply over %zu bytes", method, path, max_reply);
                r = -EMSGSIZE;
        } else if (cr != CURLE_OK) {
                snprintf(err, errlen, "%s %.200s: %s", method, path, q.errbuf[0] ? q.errbuf : curl_easy_strerror(cr));
                r = -EIO;
        } else if (!rep.buf && !(rep.buf = calloc(1, 1))) {
                snprintf(err, errlen, "out of memory");
                r = -ENOMEM;
        } else {
                curl_easy_getinfo(q.easy, CURLINFO_RESPONSE_CODE, &code);
                *ret_code = code;
                *ret_body = rep.buf;
                *ret_len = rep.len;
                rep.buf = NULL;
        }
        free(rep.buf);
        gs_kapi_req_free(&q);
        return r;
}

int gs_kapi_req_new(struct gs_kapi_req *q, const char *url, const char *token_file, const char *ca_file,
                    const char *content_type, char *err, size_t errlen)
{
        static const char bearer[] = "Authorization: Bearer ";
        int r;

        memset(q, 0, sizeof(*q));
        q->easy = curl_easy_init();
        if (!q->easy) {
                snprintf(err, errlen, "curl_easy_init failed");
                return -ENOMEM;
        }
        if (token_file && token_file[0]) {
                q->auth = malloc(sizeof(bearer) + GS_KAPI_TOKEN_MAX);
                if (!q->auth) {
                        r = -ENOMEM;
                        snprintf(err, errlen, "out of memory");
                        goto fail;
                }
                memcpy(q->auth, bearer, sizeof(bearer));
                r = gs_kapi_read_token(token_file, q->auth + sizeof(bearer) - 1, GS_KAPI_TOKEN_MAX);
                if (r < 0) {
                        snprintf(err, errlen, "cannot read the token %.300s: %s", token_file,
                                 r == -EINVAL    ? "not one line of printable characters"
                                 : r == -ENODATA ? "empty"
                                                 : strerror(-r));
                        goto fail;
                }
                q->hdrs = curl_slist_append(q->hdrs, q->auth);
        }
        q->hdrs = curl_slist_append(q->hdrs, "Accept: application/json");
        if (content_type) {
                char ct[128];
                snprintf(ct, sizeof(ct), "Content-Type: %s", content_type);
                q->hdrs = curl_slist_append(q->hdrs, ct);
        }
        if (!q->hdrs) {
                r = -ENOMEM;
                snprintf(err, errlen, "out of memory");
                goto fail;
        }
        curl_easy_setopt(q->easy, CURLOPT_URL, url);
        curl_easy_setopt(q->easy, CURLOPT_HTTPHEADER, q->hdrs);
        curl_easy_setopt(q->easy, CURLOPT_PROTOCOLS_STR, "http,https");
        curl_easy_setopt(q->easy, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(q->easy, CURLOPT_USERAGENT, "gshare");
        curl_easy_setopt(q->easy, CURLOPT_ERRORBUFFER, q->errbuf);
        if (ca_file && ca_file[0])
                curl_easy_setopt(q->easy, CURLOPT_CAINFO, ca_file);
        return 0;
fail:
        gs_kapi_req_free(q);
        return r;
}

void gs_kapi_req_free(struct gs_kapi_req *q)
{
        if (q->auth) {
                explicit_bzero(q->auth, strlen(q->auth));
                free(q->auth);
        }
        curl_slist_free_all(q->hdrs);
        if (q->easy)
                curl_easy_cleanup(q->easy);
        memset(q, 0, sizeof(*q));
}
